"""Vela versions side by side: what a Vela upgrade changes, per model and target.

Read from summary rows (one sweep with `vela: {versions: [...]}`, or two sweeps made with
different Vela versions) and, per layer, from Vela's per-layer CSVs. All figures are Vela's
compiler estimates, each version's own performance model: a change in cycles is a change in
the estimate, not a measurement. Torch-free.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ethosweep.matrix.cell import Cell, cell_id
from ethosweep.results.table import number

# What is compared, and how each change is named when it is worse.
FIGURES = (
    ("vela_cycles_total", "cycles"),
    ("vela_sram_kib", "SRAM"),
    ("flash_kib", "flash+DRAM"),
)
# A change smaller than this is "no change": Vela's estimates move by a few cycles between
# runs of different versions on tiny models (the `add` toy model: 1-2 cycles).
NOISE_PCT = 0.5


def version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in str(version).split("."))


def flash_kib(row: dict) -> float:
    """Off-chip and on-chip flash and DRAM: where the weights and command stream live."""
    parts = [number(row.get(k)) for k in ("vela_off_chip_flash_kib", "vela_on_chip_flash_kib", "vela_dram_kib")]
    return math.nan if all(math.isnan(p) for p in parts) else sum(p for p in parts if not math.isnan(p))


def figure_of(row: dict, key: str) -> float:
    return flash_kib(row) if key == "flash_kib" else number(row.get(key))


def _pct(old: float, new: float) -> float | None:
    if math.isnan(old) or math.isnan(new) or old == 0:
        return None
    return 100.0 * (new - old) / old


@dataclass
class CellChange:
    """One cell (model, scheme, target, system config, memory mode) under two Vela versions."""

    key: tuple[str, ...]
    base: dict
    new: dict
    changes: dict[str, float | None] = field(default_factory=dict)  # figure -> % change
    layer: str = ""  # where a layer's cycles moved most (per-layer CSVs)

    @property
    def same_program(self) -> bool:
        """Both versions wrote the same .pte: the same command stream and weights, so a change in
        cycles is a change in Vela's performance model only, not in what the NPU would run."""
        return bool(self.base.get("pte_sha256")) and self.base.get("pte_sha256") == self.new.get("pte_sha256")

    @property
    def status_change(self) -> str:
        if self.base.get("status") == "ok" and self.new.get("status") != "ok":
            return f"fails: {self.new.get('reason', '')}"
        if self.base.get("status") != "ok" and self.new.get("status") == "ok":
            return "compiles (failed before)"
        return ""


@dataclass
class TargetChange:
    """A model on a target: its memory modes' changes from one Vela version to another."""

    model: str
    quant: str
    target: str
    system_config: str
    base_version: str
    new_version: str
    cells: list[CellChange]

    def range_of(self, figure: str) -> tuple[float, float] | None:
        values = [c.changes.get(figure) for c in self.cells if c.changes.get(figure) is not None]
        return (min(values), max(values)) if values else None

    @property
    def largest(self) -> float:
        """The size of the largest change in any figure (for sorting: largest first); a failure counts most."""
        if any(c.status_change for c in self.cells):
            return math.inf
        values = [abs(v) for c in self.cells for v in c.changes.values() if v is not None]
        return max(values, default=0.0)

    @property
    def unchanged(self) -> bool:
        """No figure of any memory mode moved beyond the noise, and every cell compiles as before."""
        return not any(c.status_change for c in self.cells) and self.largest < NOISE_PCT

    @property
    def regressions(self) -> list[str]:
        """What got worse: a cell that fails now, or a figure up by more than the noise."""
        found = [f"{c.key[-1]}: {c.status_change}" for c in self.cells if c.status_change.startswith("fails")]
        for figure, label in FIGURES:
            span = self.range_of(figure)
            if span and span[1] > NOISE_PCT:
                found.append(f"+{span[1]:.1f} % {label}")
        return found

    def sentence(self) -> str:
        """'Vela 5.2.0 vs 5.1.0: mobilenet_v2 [int8] on ethos-u55-128 -7.1 % cycles (...)'."""
        head = f"Vela {self.new_version} vs {self.base_version}: {self.model} [{self.quant}] on {self.target}"
        failing = [c for c in self.cells if c.status_change]
        if failing and len(failing) == len(self.cells):
            return f"{head}: {failing[0].status_change}"
        parts = []
        for figure, label in FIGURES:
            span = self.range_of(figure)
            if span is None:
                continue
            low, high = span
            if low == high == 0:
                parts.append(f"{label} unchanged")
            elif max(abs(low), abs(high)) < NOISE_PCT:
                parts.append(f"{label} within ±{NOISE_PCT:g} %")
            elif abs(high - low) < NOISE_PCT:
                parts.append(f"{_signed(high)} % {label}")
            else:
                parts.append(f"{_signed(low)} to {_signed(high)} % {label}")
        modes = len(self.cells)
        text = f"{head} " + ", ".join(parts) + f" (over {modes} memory mode{'s' if modes != 1 else ''})"
        compared = [c for c in self.cells if c.changes]
        if compared and all(c.same_program for c in compared):
            text += "; the same .pte from both: only the estimate moved, not the program"
        if failing:
            text += "; " + "; ".join(f"{c.key[-1]} {c.status_change}" for c in failing)
        if self.regressions:
            text += " — regression: " + ", ".join(self.regressions)
        return text


def _signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "−")


def _cell_key(row: dict) -> tuple[str, ...]:
    return tuple(row.get(k, "") for k in ("model", "quantization", "target", "system_config", "memory_mode"))


def one_row_per_cell(rows: list[dict]) -> list[dict]:
    """A cell on several boards has a row per board with the same Vela figures: keep one."""
    seen, cells = set(), []
    for row in rows:
        key = (cell_id(row), row.get("vela_version", ""))
        if key not in seen:
            seen.add(key)
            cells.append(row)
    return cells


def versions_in(rows: list[dict]) -> list[str]:
    return sorted({r.get("vela_version", "") for r in rows if r.get("vela_version")}, key=version_key)


def compare_versions(
    rows: list[dict], base_version: str | None = None, per_layer: dict[str, str] | None = None
) -> list[TargetChange]:
    """Each (model, scheme, target) under every Vela version against `base_version` (default: the
    installed Vela's, whose cells have no '@vela-' in their path, else the oldest), largest changes
    first. `per_layer`: cell id -> its per-layer CSV, to name the layer whose cycles moved most."""
    rows = one_row_per_cell(rows)
    versions = versions_in(rows)
    if len(versions) < 2:
        return []
    installed = {r["vela_version"] for r in rows if r.get("vela_version") and Cell.of(r).vela_version is None}
    base_version = base_version or (installed.pop() if len(installed) == 1 else versions[0])
    by_version: dict[str, dict[tuple, dict]] = defaultdict(dict)
    for row in rows:
        by_version[row["vela_version"]][_cell_key(row)] = row
    result = []
    for new_version in [v for v in versions if v != base_version]:
        groups: dict[tuple, list[CellChange]] = defaultdict(list)
        for key, new in by_version[new_version].items():
            base = by_version[base_version].get(key)
            if base is None:
                continue
            change = CellChange(key, base, new)
            if base.get("status") == "ok" and new.get("status") == "ok":
                change.changes = {f: _pct(figure_of(base, f), figure_of(new, f)) for f, _ in FIGURES}
                if per_layer and cell_id(base) in per_layer and cell_id(new) in per_layer:
                    change.layer = moved_layer(per_layer[cell_id(base)], per_layer[cell_id(new)])
            groups[key[:4]].append(change)
        for (model, quant, target, system_config), cells in groups.items():
            result.append(TargetChange(model, quant, target, system_config, base_version, new_version, cells))
    result.sort(key=lambda t: (-t.largest, t.model, t.target))
    return result


def read_layers(path: str | Path) -> dict[tuple, dict]:
    """Vela's per-layer rows by (partition, layer name, occurrence): the same layer in two versions."""
    layers, seen = {}, defaultdict(int)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            name = (row.get("partition", "0"), row.get("Name", ""))
            layers[(*name, seen[name])] = row
            seen[name] += 1
    return layers


def moved_layer(base_csv: str | Path, new_csv: str | Path) -> str:
    """The layer whose cycles changed most between two per-layer CSVs, in one line."""
    try:
        base, new = read_layers(base_csv), read_layers(new_csv)
    except (OSError, csv.Error):
        return ""
    best = None
    for key, row in new.items():
        if key not in base:
            continue
        old_cycles, new_cycles = number(base[key].get("Op Cycles")), number(row.get("Op Cycles"))
        if math.isnan(old_cycles) or math.isnan(new_cycles):
            continue
        delta = new_cycles - old_cycles
        if best is None or abs(delta) > abs(best[0]):
            best = (delta, key, row, old_cycles, new_cycles)
    if best is None or best[0] == 0:
        return ""
    delta, (partition, name, _), row, old_cycles, new_cycles = best
    pct = f" ({_signed(100 * delta / old_cycles)} %)" if old_cycles else ""
    return (
        f"layer {name} ({row.get('Original Operator', '')}, partition {partition}): "
        f"{int(old_cycles):,} → {int(new_cycles):,} cycles{pct}"
    )


def unchanged_line(changes: list[TargetChange]) -> str:
    """The models and targets on which nothing moved beyond the noise, in one line."""
    still = [c for c in changes if c.unchanged]
    if not still:
        return ""
    by_target: dict[str, list[str]] = defaultdict(list)
    for change in still:
        by_target[change.target].append(change.model)
    return f"Within ±{NOISE_PCT:g} % in cycles, SRAM and flash: " + "; ".join(
        f"{', '.join(models)} on {target}" for target, models in by_target.items()
    )


def format_changes(changes: list[TargetChange], limit: int | None = None) -> list[str]:
    """The comparison for a terminal: a line per model and target that changed, the layer that
    moved most, and one line for those that did not."""
    lines = []
    for change in [c for c in changes if not c.unchanged][:limit]:
        lines.append(change.sentence())
        moved = max(
            (c for c in change.cells if c.layer),
            key=lambda c: abs(c.changes.get("vela_cycles_total") or 0),
            default=None,
        )
        if moved is not None:
            lines.append(f"    most moved in {moved.key[-1]}: {moved.layer}")
    if unchanged_line(changes):
        lines.append(unchanged_line(changes))
    return lines
