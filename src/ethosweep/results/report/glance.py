"""The report's first screen, as data: the whole sweep in one matrix, then one table per board.

The matrix is model x (target, memory mode), coloured by Vela's time on a log scale and marked
where a cell failed, fits on none of its boards or leaves work on the CPU. Each board's table has
a row per model: the pick of ethosweep.results.picks (the fastest memory mode that fits),
with its numbers in columns and the best of each column marked, and the pick's sentence behind
the row's link. Every number is a summary.csv field (or a board's size minus a summary margin),
kept beside its text as `value` so the browser test can hold the page to the CSV. Torch-free.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ethosweep.matrix.cell import cell_id
from ethosweep.results import picks
from ethosweep.results.table import DOES_NOT_FIT, number, unique_cells

# YlOrRd, the colour map the cycles plot uses, at five stops: fast cells pale, slow ones dark
COLOURS = ((255, 255, 204), (254, 217, 118), (253, 141, 60), (227, 26, 28), (128, 0, 38))
FLOOR_MS = 1e-3
REGION_NAMES = {"sram": "SRAM", "flash": "flash", "dram": "DRAM"}


def anchor(row: dict) -> str:
    """The id of a cell's detail section (from a cell record or a summary row)."""
    return "cell-" + cell_id(row).replace("/", "-")


def section_href(row: dict) -> str:
    """A link to the cell's detail section on the page."""
    return "#" + anchor(row)


def colour(fraction: float) -> str:
    """The matrix's colour for a position 0..1 on its log scale."""
    fraction = min(max(fraction, 0.0), 1.0) * (len(COLOURS) - 1)
    low = min(int(fraction), len(COLOURS) - 2)
    mix = fraction - low
    rgb = (round(a + (b - a) * mix) for a, b in zip(COLOURS[low], COLOURS[low + 1]))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def dark(fraction: float) -> bool:
    """Whether a cell's colour needs white text."""
    return fraction > 0.6


# Past this many (target, memory mode) columns the matrix shows a column per target, each cell its
# fastest memory mode: the whole configuration space (50 columns) is a wall of squares, not a glance
MAX_MATRIX_COLUMNS = 16


def sweep_matrix(rows: list[dict], cell_href=section_href) -> dict:
    """Model (and scheme, when several) x (target, memory mode), grouped by task: each cell's Vela time
    and what to mark; with more than MAX_MATRIX_COLUMNS columns, a column per target (its fastest
    memory mode). `cell_href(row)`: where a cell's link goes (default: its section on the page)."""
    boards_of = defaultdict(list)
    for row in rows:
        if row.get("board"):
            boards_of[cell_id(row)].append(row)
    cells = unique_cells(rows)
    # a row per model and scheme when the sweep has several (one scheme's cells would hide the other's)
    several = len({r["quantization"] for r in cells}) > 1

    def label(r: dict) -> str:
        return f"{r['model']} [{r['quantization']}]" if several else r["model"]

    by_target = len({(r["target"], r["memory_mode"]) for r in cells}) > MAX_MATRIX_COLUMNS
    column = (lambda r: (r["target"], "")) if by_target else (lambda r: (r["target"], r["memory_mode"]))  # noqa: E731
    tasks = {label(r): r.get("task") or "" for r in cells}
    task_order = list(dict.fromkeys(tasks.values()))
    models = sorted(dict.fromkeys(label(r) for r in cells), key=lambda m: task_order.index(tasks[m]))
    columns = list(dict.fromkeys(column(r) for r in cells))
    times = [number(r.get("vela_inference_ms")) for r in cells if r.get("status") == "ok"]
    # floored at a microsecond, where the matrix says "<0.001": a one-operator cell of a few cycles
    # would otherwise stretch the scale over six decades and leave every real model one colour
    times = [max(t, FLOOR_MS) for t in times if not math.isnan(t)]
    low, high = (math.log10(min(times)), math.log10(max(times))) if times else (0.0, 0.0)
    grid = {(m, c): None for m in models for c in columns}
    for row in sorted(cells, key=_fastest_first):  # by target: its fastest memory mode first
        key = (label(row), column(row))
        if grid[key] is None or (by_target and grid[key]["ms"] is None and _compiled(row)):
            grid[key] = _matrix_cell(row, boards_of[cell_id(row)], low, high, cell_href(row), by_target)
    return {
        "columns": [{"target": t, "memory_mode": m} for t, m in columns],
        "by_target": by_target,
        "rows": [{"model": m, "task": tasks[m], "cells": [grid[m, c] for c in columns]} for m in models],
    }


def _compiled(row: dict) -> bool:
    return row.get("status") == "ok" and not math.isnan(number(row.get("vela_inference_ms")))


def _fastest_first(row: dict) -> tuple:
    return (not _compiled(row), number(row.get("vela_inference_ms"), math.inf))


def _matrix_cell(
    row: dict, placements: list[dict], low: float, high: float, href: str, by_target: bool = False
) -> dict:
    ms = number(row.get("vela_inference_ms"))
    failed = row.get("status") != "ok" or math.isnan(ms)
    fits_nowhere = bool(placements) and all(p.get("fit", "").startswith(DOES_NOT_FIT) for p in placements)
    cpu_ops = number(row.get("cpu_ops"), 0.0)
    fraction = 0.0 if failed or high <= low else (math.log10(max(ms, FLOOR_MS)) - low) / (high - low)
    marks = [
        *([row["status"] if row.get("status") == DOES_NOT_FIT else "failed"] if failed else []),
        *([DOES_NOT_FIT] if fits_nowhere and not failed else []),
        *(["+CPU"] if cpu_ops > 0 and not failed else []),
    ]
    boards = "; ".join(f"{p['board']}: {p.get('fit', '')}" for p in placements) or "on no board"
    mode = f"fastest memory mode: {row['memory_mode']}; " if by_target else ""
    return {
        "ms": None if failed else ms,
        "colour": None if failed else colour(fraction),
        "dark": not failed and dark(fraction),
        "marks": marks,
        "anchor": anchor(row),
        "href": href,
        "cell": cell_id(row),
        "title": row.get("reason") if failed else mode + boards,
    }


def board_tables(
    rows: list[dict],
    boards: dict[str, dict],
    budget_ms: float | None,
    board_budgets: dict[str, float] | None,
    cell_href=section_href,
) -> list[dict]:
    """Per board, then for the bare targets: a row per model (picks's pick, in columns), grouped
    by task. `cell_href(row)`: where a cell's link goes (default: its section on the page)."""
    tables = []
    for section in picks.board_sections(rows, boards, budget_ms, board_budgets):
        tables.append(_table(section, boards[section.board], cell_href))
    bare = picks.bare_section(rows, budget_ms)
    if bare:
        tables.append(_table(bare, None, cell_href))
    return tables


def _table(section: picks.Section, board: dict | None, href) -> dict:
    time_column = "board_inference_ms" if board else "vela_inference_ms"
    rows = [_board_row(pick, board, time_column, href) for pick in section.picks]
    timed = [r["ms"] for r in rows if r["ms"] is not None]
    for row in rows:
        row["bar_pct"] = round(100 * row["ms"] / max(timed), 1) if row["ms"] is not None and max(timed) > 0 else 0
    _mark_best(rows)
    families = list(dict.fromkeys(f for pick in section.picks for f in pick.families))
    return {
        "title": section.title,
        "board": section.board or "",
        "summary": section.summary,
        "budget_ms": section.budget_ms,
        "on_board": board is not None,
        # a column per NPU family on no board, where the sweep has several (the fastest overall is
        # always the largest NPU)
        "families": families if len(families) > 1 else [],
        "tasks": len({r["task"] for r in rows}) > 1,
        "rows": rows,
    }


def _board_row(pick: picks.Pick, board: dict | None, time_column: str, href) -> dict:
    row = pick.row or {}
    shown = pick.verdict != "failed" and row
    ms = number(row.get(time_column)) if shown else math.nan
    return {
        "model": pick.model,
        "verdict": pick.verdict,
        "fits": _fits(row, board) if shown else None,
        "configuration": (row["memory_mode"] if board else f"{row['target']} / {row['memory_mode']}") if shown else "",
        "ms": None if math.isnan(ms) else ms,
        "ms_field": time_column,
        "sram": _region(row, board, "sram") if shown and board else None,
        "model_memory": _model_memory(row, board) if shown and board else None,
        "cpu_ops": int(number(row.get("cpu_ops"), 0)) if shown else None,
        "top1_float": _fraction(row.get("top1_float")) if shown else None,
        "top1_npu": _fraction(row.get("top1_npu")) if shown else None,
        "numerics": row.get("numerics", "") if shown else "",
        "sentence": pick.text,
        "anchor": anchor(row) if row else "",
        "href": href(row) if row else "",
        "cell": cell_id(row) if row else "",
        "task": pick.task,
        "families": {
            family: {"configuration": f"{r['target']} / {r['memory_mode']}", "ms": number(r["vela_inference_ms"])}
            for family, r in pick.families.items()
        },
        "best": set(),
    }


def _fits(row: dict, board: dict | None) -> dict | None:
    """Yes/no and the binding memory: the fullest region (or the most short one)."""
    if board is None:
        return None
    regions = [r for r in ("sram", "flash", "dram") if _region(row, board, r)]
    if not regions:
        return {"yes": row.get("fit") == "fits", "binding": ""}
    binding = min(regions, key=lambda r: _region(row, board, r)["margin_kib"] / max(board["sizes_kib"][r], 1e-9))
    region = _region(row, board, binding)
    if row.get("fit") == "fits":
        return {"yes": True, "binding": f"{REGION_NAMES[binding]} {region['full_pct']:.0f} % full"}
    return {"yes": False, "binding": f"{REGION_NAMES[binding]} short by {-region['margin_kib']:,.1f} KiB"}


def _region(row: dict, board: dict, region: str) -> dict | None:
    """A board region's use by a cell: used = the board's size minus the summary's margin."""
    margin = number(row.get(f"fit_{region}_margin_kib"))
    size = number(board["sizes_kib"].get(region))
    if math.isnan(margin) or math.isnan(size) or size <= 0:
        return None
    return {
        "name": REGION_NAMES[region],
        "field": f"fit_{region}_margin_kib",
        "margin_kib": margin,
        "used_kib": round(size - margin, 1),
        "full_pct": 100 * (size - margin) / size,
    }


def _model_memory(row: dict, board: dict) -> dict | None:
    """The region the .pte is placed in besides SRAM: flash (MRAM) or DRAM, whichever it uses."""
    return _region(row, board, "flash") or _region(row, board, "dram")


def _fraction(value) -> float | None:
    figure = number(value)
    return None if math.isnan(figure) else figure


BEST = {  # column -> (how a row's value is read, whether higher is better)
    "ms": (lambda r: r["ms"], False),
    "sram": (lambda r: r["sram"] and r["sram"]["used_kib"], False),
    "model_memory": (lambda r: r["model_memory"] and r["model_memory"]["used_kib"], False),
    "cpu_ops": (lambda r: r["cpu_ops"], False),
    "top1_npu": (lambda r: r["top1_npu"], True),
}


def _mark_best(rows: list[dict]) -> None:
    """Mark each column's best value among the rows that fit (or, on no board, compiled), where it
    singles rows out: one row, or fewer than half of them (eight models with no CPU operator
    marked "best" would draw the eye to nothing)."""
    candidates = [r for r in rows if r["verdict"] not in ("failed", DOES_NOT_FIT)]
    for column, (value_of, higher) in BEST.items():
        values = [(value_of(r), r) for r in candidates if value_of(r) is not None]
        if len(values) < 2 or len({v for v, _ in values}) < 2:
            continue
        best = (max if higher else min)(v for v, _ in values)
        winners = [row for value, row in values if value == best]
        if len(winners) == 1 or len(winners) < len(values) / 2:
            for row in winners:
                row["best"].add(column)
