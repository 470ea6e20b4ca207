"""What to pick: per board (and for the bare targets), which models fit and in which configuration.

The report opens with this. For each board of the sweep and each model:
- whether it fits, and in which memory modes (the board profile's fit check);
- the fastest configuration that fits (Vela's cycles at the board's NPU clock);
- whether that meets the latency budget, if one is configured (`report.latency_budget_ms`,
  or per board `report.board_latency_budget_ms`);
- the accuracy cost, where the model has labelled data (top-1 float -> NPU path).
For the cells on no board (bare targets), per model:
- the fastest configuration (Vela's estimate at the system config's clock);
- with a budget, the smallest NPU configuration (fewest MACs per cycle) that meets it.
Every statement carries the numbers it comes from, and the sweep's own words for what they are:
Vela's figures are compiler estimates. When nothing fits or nothing meets the budget, it says so
and names the closest miss rather than recommending anything. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ethosweep.matrix.targets import macs_per_cycle
from ethosweep.results.table import DOES_NOT_FIT, number


@dataclass
class Pick:
    model: str
    verdict: str  # "fits" | "does not fit" | "fastest" | "meets budget" | "misses budget" | "failed"
    text: str  # the recommendation, with its numbers
    row: dict | None = None  # the summary row it rests on
    task: str = ""  # the model's task (the config's `task`): how the picks are grouped
    # on no board: the fastest configuration of each NPU family swept (family -> row)
    families: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"model": self.model, "task": self.task, "verdict": self.verdict, "text": self.text}


@dataclass
class Section:
    title: str  # "alif-e8 (ethos-u55-128, 160 MHz)" or "bare targets"
    budget_ms: float | None
    picks: list[Pick] = field(default_factory=list)
    summary: str = ""  # "3 of 9 models fit"
    board: str | None = None  # the board's name; None for the bare targets

    def as_dict(self) -> dict:
        return {
            "title": self.title,
            "budget_ms": self.budget_ms,
            "summary": self.summary,
            "picks": [p.as_dict() for p in self.picks],
        }


def _ok(row: dict) -> bool:
    return row.get("status") == "ok" and not math.isnan(number(row.get("vela_inference_ms")))


def accuracy_cost(rows: list[dict]) -> str:
    """'top-1 98.0 % float -> 97.8 % NPU path (held-out data)' for a model with labelled data, else ''."""
    for row in rows:
        f, n = number(row.get("top1_float")), number(row.get("top1_npu"))
        if not math.isnan(f) and not math.isnan(n):
            return (
                f"top-1 {100 * f:.1f} % float → {100 * n:.1f} % on the NPU path ({row.get('data') or 'labelled data'})"
            )
    return ""


def board_sections(
    rows: list[dict],
    boards: dict[str, dict],
    budget_ms: float | None = None,
    board_budgets: dict[str, float] | None = None,
) -> list[Section]:
    """One section per board: each model's best placement on it."""
    sections = []
    for name, board in boards.items():
        budget = (board_budgets or {}).get(name, budget_ms)
        mine = [r for r in rows if r.get("board") == name]
        section = Section(
            f"{name} ({board.get('target', '')}, NPU at {said_number(board.get('npu_clock_mhz'))} MHz)",
            budget,
            board=name,
        )
        models = list(dict.fromkeys(r["model"] for r in mine))
        for model in models:
            section.picks.append(board_pick(model, [r for r in mine if r["model"] == model], budget))
        section.picks = by_task(section.picks, mine)
        fitting = sum(1 for p in section.picks if p.verdict in ("fits", "meets budget", "misses budget"))
        section.summary = f"{fitting} of {len(models)} models fit"
        if budget is not None:
            section.summary += (
                f"; {sum(1 for p in section.picks if p.verdict == 'meets budget')} within {said_number(budget)} ms"
            )
        sections.append(section)
    return sections


def _failed(model: str, rows: list[dict]) -> Pick:
    """No cell of the model compiled: the first failure's reason, and its cell (for its page); 'does
    not fit' where no cell's tensors fit the SRAM its memory mode gives."""
    failed = next((r for r in rows if r.get("reason")), None)
    why = failed.get("reason") if failed else "no cell compiled"
    if rows and all(r.get("status") == DOES_NOT_FIT for r in rows):
        return Pick(model, DOES_NOT_FIT, f"does not fit in any memory mode: {why}", failed)
    return Pick(model, "failed", f"failed: {why}", failed)


def _failures(rows: list[dict], where=lambda row: row["memory_mode"]) -> str:
    """'; failed in Sram_Only: <reason>' for the cells of a pick that did not compile ('does not fit
    in' for those too large for their memory mode)."""
    failed = [r for r in rows if r.get("status") not in ("ok", None)]
    said = []
    for r in failed:
        word = DOES_NOT_FIT if r["status"] == DOES_NOT_FIT else "failed"  # every other status: failed
        said.append(f"; {word} in {where(r)}: {r.get('reason') or r['status']}")
    return "".join(said)


def _mode_of(rows: list[dict]):
    """How a board's cells of one model are told apart: the memory mode, with the quantization
    scheme before it when the model was swept in several (else 'Sram_Only' would be listed twice)."""
    if len({r.get("quantization") for r in rows}) > 1:
        return lambda row: f"{row['quantization']} {row['memory_mode']}"
    return lambda row: row["memory_mode"]


def board_pick(model: str, rows: list[dict], budget_ms: float | None) -> Pick:
    compiled = [r for r in rows if _ok(r)]
    if not compiled:
        return _failed(model, rows)
    fits = [r for r in compiled if r.get("fit") == "fits"]
    accuracy = accuracy_cost(compiled)
    mode = _mode_of(rows)
    if not fits:
        closest = min(compiled, key=_overshoot)
        return Pick(
            model,
            DOES_NOT_FIT,
            f"does not fit in any memory mode; closest: {mode(closest)}, "
            f"{closest['fit'].removeprefix('does not fit: ')}",
            closest,
        )
    best = min(fits, key=lambda r: _ranked(r, "board_inference_ms"))
    modes = ", ".join(mode(r) for r in sorted(fits, key=lambda r: _ranked(r, "board_inference_ms")))
    ms = number(best.get("board_inference_ms"))
    text = (
        f"fastest that fits: {mode(best)}, {_time(ms, best)} (Vela estimate at the board's clock), "
        f"margin {_margins(best)}; fits in {modes}"
    )
    verdict = "fits"
    if budget_ms is not None and ms > budget_ms:
        verdict = "misses budget"
        text += f"; misses the {said_number(budget_ms)} ms budget by {said_number(ms - budget_ms)} ms"
    elif budget_ms is not None and _has_cpu_part(best):  # the CPU's part may take it over
        text += f"; its NPU part alone is within the {said_number(budget_ms)} ms budget"
    elif budget_ms is not None:
        verdict = "meets budget"
        text += f"; within the {said_number(budget_ms)} ms budget"
    if accuracy:
        text += f"; {accuracy}"
    return Pick(model, verdict, text + _failures(rows, mode), best)


def bare_section(rows: list[dict], budget_ms: float | None = None) -> Section | None:
    """The cells on no board: per model the fastest configuration, and with a budget the smallest
    NPU (fewest MACs per cycle) that meets it."""
    bare = [r for r in rows if not r.get("board")]
    if not bare:
        return None
    section = Section("bare targets (cells on no board: Vela's estimate at the system config's clock)", budget_ms)
    models = list(dict.fromkeys(r["model"] for r in bare))
    for model in models:
        section.picks.append(bare_pick(model, [r for r in bare if r["model"] == model], budget_ms))
    section.picks = by_task(section.picks, bare)
    if budget_ms is not None:
        section.summary = (
            f"{sum(1 for p in section.picks if p.verdict == 'meets budget')} of {len(models)} models "
            f"within {said_number(budget_ms)} ms"
        )
    else:
        section.summary = f"{sum(1 for p in section.picks if p.verdict != 'failed')} of {len(models)} models compiled"
    return section


def bare_pick(model: str, rows: list[dict], budget_ms: float | None) -> Pick:
    compiled = [r for r in rows if _ok(r)]
    if not compiled:
        return _failed(model, rows)
    where = _config_of(rows)
    fastest = min(compiled, key=lambda r: _ranked(r, "vela_inference_ms"))
    text = f"fastest: {where(fastest)}, {_time(number(fastest['vela_inference_ms']), fastest)} (Vela estimate)"
    verdict = "fastest"
    if budget_ms is not None:
        within = [r for r in compiled if number(r["vela_inference_ms"]) <= budget_ms]
        meeting = [r for r in within if not _has_cpu_part(r)]  # a CPU part's time is not known
        if within and not meeting:
            smallest = min(within, key=lambda r: (macs_per_cycle(r["target"]), number(r["vela_inference_ms"])))
            text += (
                f"; within the {said_number(budget_ms)} ms budget on their NPU part alone only configurations "
                f"with a CPU part, whose time is not estimated ({len(within)}; the smallest NPU: {where(smallest)})"
            )
        elif meeting:
            smallest = min(meeting, key=lambda r: (macs_per_cycle(r["target"]), number(r["vela_inference_ms"])))
            verdict = "meets budget"
            its_time = _time(number(smallest["vela_inference_ms"]), smallest)
            text += (
                f"; smallest NPU within {said_number(budget_ms)} ms: {where(smallest)} "
                f"({macs_per_cycle(smallest['target'])} MACs/cycle, {its_time})"
            )
        else:
            verdict = "misses budget"
            closest = min(number(r["vela_inference_ms"]) for r in compiled)
            text += (
                f"; no configuration of the sweep is within the {said_number(budget_ms)} ms budget "
                f"(the closest misses it by {said_number(closest - budget_ms)} ms)"
            )
    families = fastest_per_family(compiled)
    if len(families) > 1:
        text += "; per NPU family: " + ", ".join(
            f"{where(row)} {_time(number(row['vela_inference_ms']), row)}" for row in families.values()
        )
    accuracy = accuracy_cost(compiled)
    if accuracy:
        text += f"; {accuracy}"
    return Pick(model, verdict, text + _failures(rows, where), fastest, families=families)


def by_task(picks: list[Pick], rows: list[dict]) -> list[Pick]:
    """The picks grouped by their models' task, in the order tasks first appear (models keep theirs)."""
    task = {r["model"]: r.get("task") or "" for r in rows}
    order = list(dict.fromkeys(task.get(p.model, "") for p in picks))
    for pick in picks:
        pick.task = task.get(pick.model, "")
    return sorted(picks, key=lambda p: order.index(p.task))


def fastest_per_family(rows: list[dict]) -> dict[str, dict]:
    """family -> the fastest compiled configuration of that NPU family (what to pick where the sweep
    covers several families and every size: the fastest overall is always the largest NPU)."""
    from ethosweep.matrix.targets import family

    best: dict[str, dict] = {}
    for row in sorted((r for r in rows if _ok(r)), key=lambda r: _ranked(r, "vela_inference_ms")):
        best.setdefault(family(row["target"]), row)
    return dict(sorted(best.items()))


def _config_of(rows: list[dict]):
    """How a model's cells on no board are told apart: target and memory mode, with the scheme
    before them when the model was swept in several (as _mode_of does for a board's cells)."""
    if len({r.get("quantization") for r in rows}) > 1:
        return lambda row: f"{row['quantization']} {row['target']} / {row['memory_mode']}"
    return lambda row: f"{row['target']} / {row['memory_mode']}"


def _overshoot(row: dict) -> float:
    """How far a cell that does not fit is from fitting (its most negative margin, KiB)."""
    margins = [number(row.get(f"fit_{region}_margin_kib")) for region in ("sram", "flash", "dram")]
    return -min((m for m in margins if not math.isnan(m)), default=0.0)


def _margins(row: dict) -> str:
    parts = [
        f"{region.upper()} {number(row.get(f'fit_{region}_margin_kib')):,.0f} KiB"
        for region in ("sram", "flash", "dram")
        if not math.isnan(number(row.get(f"fit_{region}_margin_kib")))
    ]
    return ", ".join(parts) or "n/a"


def _ranked(row: dict, time_column: str) -> tuple[bool, float]:
    """How cells are ranked: the cells that run whole on the NPU first, then by Vela's time. A cell
    with a CPU part has only its NPU part timed (CPU time is not estimated), and that part can be the
    lesser: DeiT-Tiny a16w8's NPU part takes 196 ms on Corstone-300, its CPU part 179 M MACs of
    int16 matrix products without an optimised kernel, while int8 runs whole in 561 ms."""
    return _has_cpu_part(row), number(row.get(time_column))


def _has_cpu_part(row: dict) -> bool:
    return number(row.get("cpu_ops"), 0.0) > 0


def _time(ms: float, row: dict) -> str:
    """A cell's time in ms; one of a few NPU cycles (a single small operator) in cycles, since
    "1.25e-05 ms" says less than "under 0.001 ms, 2 cycles". A cell with work on the CPU says its
    time is the NPU part's, and what the CPU has to do."""
    cycles = number(row.get("vela_cycles_total"))
    said = (
        f"under 0.001 ms, {cycles:,.0f} cycles"
        if 0 <= ms < 0.001 and not math.isnan(cycles)
        else f"{said_number(ms)} ms"
    )
    cpu_ops = number(row.get("cpu_ops"), 0.0)
    if cpu_ops > 0:
        macs = number(row.get("cpu_macs"), 0.0)
        work = f"{cpu_ops:.0f} operator(s)" + (f", {macs:,.0f} MACs" if macs > 0 else "")
        said = f"{said} for the NPU part, plus the CPU's ({work}; CPU time not estimated)"
    return said


def said_number(value) -> str:
    """A figure as ethosweep says it (here and in the report): three significant figures below 100,
    whole with thousands separated from there (1,750, not 1.75e+03)."""
    figure = number(value)
    if math.isnan(figure):
        return str(value)
    return f"{figure:.3g}" if abs(figure) < 100 else f"{figure:,.0f}"


def sections_for(
    rows: list[dict], boards: dict[str, dict], budget_ms: float | None = None, tasks: tuple[str, ...] = ()
) -> list[Section]:
    """What the report's first screen picks (a section per board, then the bare targets), for the
    models of `tasks` only when given."""
    if tasks:
        rows = [r for r in rows if (r.get("task") or "") in tasks]
    sections = board_sections(rows, boards, budget_ms)
    bare = bare_section(rows, budget_ms)
    return sections + ([bare] if bare else [])


def picks_text(sections: list[Section]) -> str:
    """The picks as plain text, for a terminal or a script: a heading per section, then per task a
    line per model (model, verdict, the recommendation with its numbers)."""
    lines = []
    for section in sections:
        lines += ["", f"{section.title}: {section.summary}"]
        task = None
        grouped = any(pick.task for pick in section.picks)
        for pick in section.picks:
            if grouped and pick.task != task:
                task = pick.task
                lines.append(f"  {task or 'no task'}")
            lines.append(f"    {pick.model:<28} {pick.verdict:<14} {pick.text}")
    return "\n".join(lines[1:])
