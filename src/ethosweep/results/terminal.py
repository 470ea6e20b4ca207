"""The summary as the terminal shows it at the end of a run: the matrix at a glance, then what
failed, what does not fit and what the numerics found; past TABLE_ROWS rows, the cells per task and
what fits each board instead of a row per cell. Torch-free."""

from __future__ import annotations

from collections import Counter

from ethosweep.matrix.cell import cell_id
from ethosweep.results.table import COMPILED, DOES_NOT_FIT, NOT_VERIFIED, NOT_VERIFIED_REASON, firmware_footer, number
from ethosweep.runtime.outcome import REASON_CHARS

# Past this many rows a row per cell scrolls the run's answer out of sight (the deployed zoo's sweep
# has 6,720); the default matrix (90 rows) keeps its table. summary.csv and the report hold every row.
TABLE_ROWS = 200
OUTCOMES = ("whole", "partly on the CPU", "by fallback", "will not run", DOES_NOT_FIT, "failed")


def format_table(rows: list[dict]) -> str:
    """The matrix at a glance, for the terminal, with what failed, does not fit or was found under it."""
    several_velas = len({r.get("vela_version") for r in rows}) > 1
    if len(rows) > TABLE_ROWS:
        findings = [*_findings(rows, several_velas, each_misfit=False), *firmware_footer(rows)]
        return "\n\n".join("\n".join(part) for part in (_by_task(rows), _board_fits(rows), findings) if part)
    headers = [
        "model",
        "q",
        "target",
        "memory mode",
        *(["Vela"] if several_velas else []),
        "board",
        "status",
        "NPU/CPU ops",
        "Vela cycles",
        "ms",
        "SRAM KiB",
        "flash+DRAM KiB",
        ".pte KiB",
        "fit",
        "top-1 float/NPU",
        "NPU vs quant",
        "vs float",
    ]
    out = _aligned(headers, [_line(r, several_velas) for r in rows], headers.index("NPU/CPU ops"))
    return "\n".join([*out, "", *_findings(rows, several_velas), *firmware_footer(rows)])


def _aligned(headers: list[str], lines: list[list[str]], first_number: int) -> list[str]:
    """Columns padded to their widest entry, text to the left and figures (from `first_number` on) to the right."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *lines)]
    fmt = "  ".join(f"{{:{'>' if i >= first_number else '<'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*headers), fmt.format(*["-" * w for w in widths]), *(fmt.format(*line) for line in lines)]


def outcome(row: dict) -> str:
    """How a cell compiled, in the words of OUTCOMES: a fallback keeps what Vela refused on the CPU,
    'partly on the CPU' is the partitioner's doing, 'will not run' compiled but cannot load or run,
    'does not fit' did not compile because its tensors outgrow the SRAM of its memory mode."""
    status = row.get("status")
    if status == DOES_NOT_FIT:
        return status
    if status not in COMPILED:
        return "failed"
    if status != "ok":
        return "will not run"
    if (row.get("reason") or "").startswith("fallback:"):
        return "by fallback"
    return "partly on the CPU" if row.get("delegation") == "partial" else "whole"


def _by_task(rows: list[dict]) -> list[str]:
    """A line per task: its models, its cells and how they compiled (a cell once, whatever its boards)."""
    counts: dict[str, Counter] = {}
    models: dict[str, set] = {}
    for row in {cell_id(r): r for r in rows}.values():
        task = row.get("task") or "no task"
        counts.setdefault(task, Counter())[outcome(row)] += 1
        models.setdefault(task, set()).add(row["model"])
    lines = [
        [task, str(len(models[task])), f"{sum(c.values()):,}", *(f"{c[o]:,}" for o in OUTCOMES)]
        for task, c in counts.items()
    ]
    return [
        f"{len(rows):,} rows: the cells per task and what fits each board (every row: the table, the report)",
        *_aligned(["task", "models", "cells", *OUTCOMES], lines, 1),
    ]


def _board_fits(rows: list[dict]) -> list[str]:
    """A line per board: how many of its models compile and fit in some memory mode."""
    out = ["What fits each board (each model's fastest configuration: uv run ethosweep picks --board <board>):"]
    for board in dict.fromkeys(r["board"] for r in rows if r.get("board")):
        mine = [r for r in rows if r.get("board") == board]
        fitting = {r["model"] for r in mine if r.get("status") == "ok" and r.get("fit") == "fits"}
        out.append(f"  {board} ({mine[0]['target']}): {len(fitting)} of {len({r['model'] for r in mine})} models fit")
    return out if out[1:] else []


def _line(r: dict, several_velas: bool) -> list[str]:
    """One row of the table: a compiled cell's figures are Vela's; a failed cell has none."""
    ok = r.get("status") in COMPILED

    def given(key: str) -> bool:
        return ok and r.get(key) not in ("", None)

    flash = sum(number(r.get(k), 0.0) for k in ("vela_off_chip_flash_kib", "vela_on_chip_flash_kib", "vela_dram_kib"))
    ms = _table_ms(number(r.get("vela_inference_ms"), 0.0)) + ("+CPU" if npu_part_only(r) else "")
    return [
        r["model"],
        r["quantization"],
        r["target"],
        r["memory_mode"],
        *([r.get("vela_version", "")] if several_velas else []),
        r.get("board", ""),
        _status(r),
        f"{r.get('npu_ops')}/{r.get('cpu_ops')}" if ok else "",
        f"{int(number(r.get('vela_cycles_total'), 0.0)):,}" if given("vela_cycles_total") else "",
        ms if given("vela_inference_ms") else "",
        f"{number(r.get('vela_sram_kib'), 0.0):.1f}" if given("vela_sram_kib") else "",
        f"{flash:.1f}" if given("vela_sram_kib") else "",
        f"{number(r.get('pte_bytes'), 0.0) / 1024:.1f}" if ok else "",
        _fit_cell(r) if ok else "",
        f"{_pct(r.get('top1_float'))}/{_pct(r.get('top1_npu'))}" if given("top1_npu") else "",
        _numerics_cell(r) if ok else "",
        r.get("vs_float", "") if ok else "",
    ]


def _status(r: dict) -> str:
    if r.get("status") != "ok" or not r.get("reason"):
        return r["status"]
    return "ok (fallback)" if r["reason"].startswith("fallback:") else f"ok ({r.get('delegation')})"


def _findings(rows: list[dict], several_velas: bool, each_misfit: bool = True) -> list[str]:
    """Under the table: how many cells are ok, then each failure, each misfit (unless the boards' lines
    count them) and the numerics' findings (one line per model and finding: numerics are verified per
    model and TOSA profile)."""
    failed = [r for r in rows if r.get("status") != "ok"]
    cells = {cell_id(r) for r in rows}
    failed_cells = {cell_id(r) for r in failed}
    on_boards = f" ({len(rows)} rows: a cell appears once per board it is on)" if len(rows) != len(cells) else ""
    out = [
        f"{len(cells) - len(failed_cells)} of {len(cells)} cells ok{on_boards}; "
        "cycles and memory are Vela's compiler estimates."
    ]
    if any(npu_part_only(r) for r in rows):
        out.append(
            "  ms+CPU: the NPU part's time; the operators left on the CPU are not timed (CPU time not estimated)"
        )
    out += _failures(failed, several_velas)
    if failed:
        out.append(
            "  Failures are recorded: a rerun keeps them until what they depend on changes (the model, the "
            "config, the code, the tools); to retry them anyway: uv run snakemake --cores 8 --forcerun "
            "$(uv run ethosweep failed)"
        )
    for r in rows if each_misfit else []:
        if r.get("fit", "").startswith(DOES_NOT_FIT):
            out.append(f"  {r['model']} [{r['quantization']}] on {r['board']} / {r['memory_mode']}: {r['fit']}")
    found: dict[tuple, set] = {}
    for r in rows:
        if r.get("numerics") in ("flagged", "inconclusive", "unverified"):
            key = (r["numerics"], r["model"], r["quantization"], r.get("numerics_reason", ""))
            found.setdefault(key, set()).add((r["target"], r["memory_mode"]))
    if any(r.get("numerics") == NOT_VERIFIED for r in rows):
        out.append(f"  numerics: {NOT_VERIFIED} ({NOT_VERIFIED_REASON})")
    for (status, model, quant, reason), where in sorted(found.items(), key=lambda kv: kv[0][0] != "flagged"):
        targets = ", ".join(sorted({t for t, _ in where}))
        out.append(f"  numerics {status}: {model} [{quant}] on {len(where)} cell(s) ({targets}): {reason}")
    return out


def _failures(failed: list[dict], several_velas: bool) -> list[str]:
    """One line per model, scheme and reason, whatever the number of cells it fails (a model that
    cannot export fails every cell of it the same way): the cell, or how many and which. A reason
    that names its own cell ('in partition 0 on ethos-u55-32 / Sram_Only') is the same reason as its
    siblings': at scale, one model's refusal on 20 configurations is one line, not 20."""
    where: dict[tuple, tuple[list[str], str]] = {}
    for r in failed:
        vela = f" with Vela {r.get('vela_version')}" if several_velas else ""
        own = f"{r['target']} / {r['memory_mode']}"
        reason = r.get("reason", "")
        if r["status"] == DOES_NOT_FIT:  # the line says it first
            reason = reason.replace(f"{DOES_NOT_FIT}: ", "", 1)
        key = (r["status"], r["model"], r["quantization"], _siblings_reason(reason, own))
        cells, _ = where.setdefault(key, ([], reason))
        if (cell := f"{own}{vela}") not in cells:  # once, whatever its boards
            cells.append(cell)
    lines = []
    for (status, model, quantization, shared), (cells, first) in where.items():
        shown = ", ".join(cells[:3]) + (f" and {len(cells) - 3} more" if cells[3:] else "")
        cells_text = cells[0] if len(cells) == 1 else f"on {len(cells)} cells ({shown})"
        lines.append(f"  {status}: {model} [{quantization}] {cells_text}: {first if len(cells) == 1 else shared}")
    return lines


# A record's reason is cut (runtime.execute.one_line) at a place that moves with its cell's name (24
# to 36 characters, after " on "): where it was cut, siblings are compared on what all of them kept.
_KEPT = REASON_CHARS - 60


def _siblings_reason(reason: str, own: str) -> str:
    """A cell's reason as its model's other cells would say it: its own target / memory mode in
    words that fit every one of them."""
    shared = reason.replace(f" on {own}", " on each of them")
    return shared[:_KEPT] + "..." if reason.endswith("...") else shared


def _fit_cell(row: dict) -> str:
    verdict = row.get("fit", "")
    if not verdict:
        return ""
    if verdict == "fits":
        return "fits"
    return "NO: " + ", ".join(part.split(" needs")[0] for part in verdict.removeprefix("does not fit: ").split("; "))


def npu_part_only(row: dict) -> bool:
    """Whether a compiled cell leaves work to the CPU, so that Vela's time covers only its NPU part."""
    return number(row.get("cpu_ops"), 0.0) > 0


def _table_ms(value: float) -> str:
    """Three decimals, as the plots' labels: "<0.001" rather than "0.000" for a cell that takes time."""
    return "<0.001" if 0 < value < 0.0005 else f"{value:.3f}"


def _pct(value) -> str:
    return f"{100 * number(value, 0.0):.1f}%"


def _numerics_cell(row: dict) -> str:
    """The NPU's verdict in a few words: 'identical', 'within 1 step', 'ok (9 steps)', or the verdict."""
    verdict, steps = row.get("numerics", ""), number(row.get("max_error_steps"), 0.0)
    if verdict == "within tolerance":
        return f"within {steps:g} step"
    if verdict == "ok":
        return f"ok ({steps:g} steps)"
    return verdict
