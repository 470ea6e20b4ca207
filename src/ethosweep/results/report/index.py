"""The report's page, results/report/index.html: its sections as data, rendered by index.html.

It opens on the sweep at a glance (glance.py: one matrix, a table per board), then the operator
map, the Vela versions compared, the plots, every cell in a table that sorts and filters in the
browser, the CPU-only cells, and every cell's page (cells.py). Torch-free.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ethosweep.matrix.cell import cell_id
from ethosweep.results.report import glance
from ethosweep.results.report.figures import CAPTIONS, PLOTS, inline_svg, read_plot
from ethosweep.results.report.render import block, fmt, fragment_of, render
from ethosweep.results.table import (
    COMPILED,
    DOES_NOT_FIT,
    NOT_VERIFIED,
    NOT_VERIFIED_REASON,
    firmware_footer,
    number,
    primary_rows,
    read_summary_csv,
    unique_cells,
)
from ethosweep.runtime.io import atomic_write_text
from ethosweep.runtime.provenance import tool_versions

# The full table: what each column shows (summary.csv has them all).
TABLE_COLUMNS = (
    ("model", "model"),
    ("quantization", "q"),
    ("target", "target"),
    ("memory_mode", "memory mode"),
    ("vela_version", "Vela"),
    ("board", "board"),
    ("status", "status"),
    ("delegation", "delegation"),
    ("vela_cycles_total", "Vela cycles"),
    ("vela_inference_ms", "ms (Vela)"),
    ("board_inference_ms", "ms at board clock"),
    ("vela_sram_kib", "SRAM KiB"),
    ("pte_bytes", ".pte bytes"),
    ("fit", "fit"),
    ("top1_float", "top-1 float %"),
    ("top1_npu", "top-1 NPU %"),
    ("max_error_steps", "NPU vs quant (steps)"),
    ("numerics", "NPU vs quantized"),
    ("numerics_reason", "NPU vs quantized: why"),
    ("vs_float", "quantized vs float"),
)
NUMBERS = {
    "vela_cycles_total",
    "vela_inference_ms",
    "board_inference_ms",
    "vela_sram_kib",
    "pte_bytes",
    "top1_float",
    "top1_npu",
    "max_error_steps",
}

CPU_TABLE_COLUMNS = (
    ("model", "model"),
    ("cpu", "CPU"),
    ("pte_bytes", ".pte bytes"),
    ("cmsis_nn_ops", "CMSIS-NN ops"),
    ("portable_ops", "portable ops"),
    ("planned_kib", "planned KiB"),
    ("firmware", "firmware"),
    ("elf_code_kib", "ELF code KiB"),
    ("qemu_run", "QEMU run (functional only)"),
)


def cpu_table(cpu_rows: list[dict]) -> dict:
    """The CPU-only cells: what the model costs without an NPU, and whether its firmware ran."""
    return {
        "headers": [label for _, label in CPU_TABLE_COLUMNS],
        "rows": [
            [fmt(r.get(key, "")) if key.endswith(("bytes", "ops")) else r.get(key, "") for key, _ in CPU_TABLE_COLUMNS]
            for r in cpu_rows
        ],
    }


def operator_map(operators: list[dict], models: list[dict]) -> dict:
    """What holds models back, per NPU family and scheme, then each model's share on the NPU."""
    held = [r for r in operators if int(r["models_held_back"] or 0)]
    return {
        "held": [
            [
                r["operator"],
                r["family"],
                r["scheme"],
                r["where"],
                f"{r['models_held_back']}: {r['held_back']}",
                r["reason"],
                r["way_round"],
            ]
            for r in held
        ],
        "on_npu": sorted({r["operator"] for r in operators if r["where"] == "NPU"}),
        "models": [
            [
                r["model"],
                r["family"],
                r["scheme"],
                r["delegated"],
                f"{r['npu_ops']} / {r['cpu_compute_ops']}",
                f"{r['npu_mac_share_pct']} %" if r["npu_mac_share_pct"] not in ("", None) else "",
                r["npu_cpu_switches"],
            ]
            for r in models
        ],
    }


def vela_versions(rows: list[dict], per_layer: dict[str, str] | None) -> dict | None:
    """With several versions swept, what each changes per model and target against the oldest,
    largest changes first, regressions named, and the layer whose cycles moved most."""
    from ethosweep.results import vela_versions as vv

    changes = vv.compare_versions(rows, per_layer=per_layer)
    if not changes:
        return None
    header = ["model", "q", "target", "memory mode"]
    for label in ("cycles", "SRAM KiB", "flash+DRAM KiB"):
        header += [f"{label} {changes[0].base_version}", "new", "change"]
    cells = []
    for change in changes:
        for cell in change.cells:
            values = [change.model, change.quant, change.target, cell.key[-1]]
            for figure, _ in vv.FIGURES:
                old, new = vv.figure_of(cell.base, figure), vv.figure_of(cell.new, figure)
                pct = cell.changes.get(figure)
                values += [
                    *("" if math.isnan(v) else fmt(v) for v in (old, new)),
                    "" if pct is None else f"{pct:+.1f} %",
                ]
            values += [change.new_version, cell.status_change or cell.new.get("status", ""), cell.layer]
            cells.append(values)
    return {
        "versions": vv.versions_in(rows),
        "base": changes[0].base_version,
        "noise_pct": vv.NOISE_PCT,
        "changes": [{"sentence": c.sentence(), "regression": bool(c.regressions)} for c in changes if not c.unchanged],
        "unchanged": vv.unchanged_line(changes),
        "headers": [*header, "Vela", "status", "layer that moved most"],
        "cells": cells,
    }


# Up to this many cells the page holds every cell's page (one file, a few MB); past it the page
# links to each cell's own file in cells/ (6,000 inlined pages would be ~100 MB: no browser opens it)
INLINE_CELL_PAGES = 300


def inlines_cell_pages(cells: int) -> bool:
    return cells <= INLINE_CELL_PAGES


def cell_linker(inline: bool):
    """Where a cell's links go: its section on the page, or, when the pages are not inlined, its own page."""
    return glance.section_href if inline else lambda row: f"cells/{cell_id(row)}.html"


def cells_table(rows: list[dict], cell_href=glance.section_href) -> str:
    """Every summary row as a table that sorts and filters in the browser, offline.

    The table is DataTables, from the itables package (a maintained Python package that ships
    the DataTables bundle, 0.6 MB, and inlines it with `connected=False`): sorting, a search over
    every column and a filter per column (DataTables' ColumnControl) without a server, a network
    or JavaScript of ours. Plots stay matplotlib SVGs: interactive plots (Plotly inlines ~3.5 MB of
    JavaScript per page) would more than quintuple the page for hover labels the tables give anyway.
    """
    import pandas as pd
    from itables.javascript import to_html_datatable

    data = []
    for r in rows:
        record = {}
        for key, label in TABLE_COLUMNS:
            value = r.get(key, "")
            if key in NUMBERS:
                figure = number(value)
                if math.isnan(figure):
                    value = ""  # blank, not "NaN" (DataTables sorts blanks with any type)
                elif key.startswith("top1"):
                    value = round(100 * figure, 1)
                else:  # whole numbers (cycles, bytes) shown without ".0"
                    value = int(figure) if figure.is_integer() else figure
            if key == "numerics_reason" and value:  # long: shortened, in full on hover
                value = block("shortened", value)
            elif isinstance(value, str):
                value = block("text", value)  # escaped: the table takes HTML
            record[label] = value
        record["detail"] = block("detail_link", cell_href(r))
        data.append(record)
    frame = pd.DataFrame(data, columns=[label for _, label in TABLE_COLUMNS] + ["detail"], dtype=object)
    text_columns = [i for i, (key, _) in enumerate(TABLE_COLUMNS) if key not in NUMBERS]
    return to_html_datatable(
        frame,
        connected=False,
        table_id="cells",
        classes="display compact cells",
        allow_html=True,
        showIndex=False,
        pageLength=25,
        scrollX=True,
        deferRender=True,  # rows are drawn as they are paged to: thousands of cells stay quick
        columnDefs=[{"className": "dt-left", "targets": text_columns}],
        lengthMenu=[10, 25, 100, 500],
        maxBytes=0,
        display_logo_when_loading=False,
        # a list of each column's values to pick from; past a thousand rows a text search instead
        # (building the lists took DataTables 2 s of a 6,000-cell page's opening)
        columnControl=["order", "searchDropdown" if len(rows) <= 1000 else "search"],
        text_in_header_can_be_selected=False,  # a header click sorts
        # search first; not itables' default layout, which it hides on tables shorter than a page
        layout={"topStart": "search", "topEnd": "pageLength", "bottomStart": "info", "bottomEnd": "paging"},
    )


def numerics_heading(rows: list[dict]) -> str:
    """'the NPU path against the quantized model: 70 cells identical, 9 within tolerance, 2 ok, 0 flagged,
    0 inconclusive' (or why nothing was verified)."""
    if rows and all(r.get("numerics") == NOT_VERIFIED for r in rows if r.get("status") == "ok"):
        return f"numerics {NOT_VERIFIED} ({NOT_VERIFIED_REASON})"
    verdicts = ("identical", "within tolerance", "ok", "flagged", "inconclusive", "unverified")
    count = {v: len(unique_cells([r for r in rows if r.get("numerics") == v])) for v in verdicts}
    shown = [f"{count[v]} {v}" for v in verdicts if count[v] or v in ("flagged", "inconclusive")]
    return "the NPU path against the quantized model: " + ", ".join(shown)


@dataclass(frozen=True)
class Plots:
    """The four plots' SVG files (report.smk's plots)."""

    cycles: str
    fit: str
    roofline: str
    pareto: str


@dataclass(frozen=True)
class Tables:
    """What the page reads beside the summary, where the sweep has it: the CPU cells' summary, every
    cell's per-layer report (several Vela versions: the layer whose cycles moved most) and the
    operator map's two tables."""

    cpu_summary: str | None = None
    per_layer: list[str] | None = None
    operators: str | None = None
    operator_models: str | None = None


@dataclass(frozen=True)
class Picking:
    """What the first screen picks for: the boards, the latency budgets, and what the page opens on."""

    boards: dict[str, dict] | None = None
    latency_budget_ms: float | None = None
    board_latency_budget_ms: dict[str, float] | None = None
    opens_on: str = "pick"


def render_index(
    rows: list[dict],
    plots: dict[str, str],
    fragments: list[tuple[dict, str]],
    sweep_text: str,
    cpu_rows: list[dict] | None = None,
    per_layer: dict[str, str] | None = None,
    operators: tuple[list[dict], list[dict]] | None = None,
    picking: Picking = Picking(),
) -> str:
    from itables.javascript import generate_init_offline_itables_html
    from itables.options import dt_bundle

    picked = primary_rows(rows)
    inline = inlines_cell_pages(len(unique_cells(rows)))
    cell_href = cell_linker(inline)
    by_model = defaultdict(list)
    for cell, page in fragments if inline else []:
        by_model[cell["model"]].append(fragment_of(page))
    return render(
        "index.html",
        sweep_text=sweep_text,
        cells_total=len(unique_cells(rows)),
        cells_compiled=len(unique_cells([r for r in rows if r["status"] in COMPILED])),
        # compiled, but the device cannot load or run the program (ethosweep.results.summary)
        cells_unrunnable=len(unique_cells([r for r in rows if r["status"] in COMPILED[1:]])),
        cells_too_large=len(unique_cells([r for r in rows if r["status"] == DOES_NOT_FIT])),
        placements_not_fitting=sum(1 for r in rows if r.get("fit", "").startswith(DOES_NOT_FIT)),
        numerics_heading=numerics_heading(rows),
        opens_on=picking.opens_on,
        matrix=glance.sweep_matrix(picked, cell_href),
        boards=glance.board_tables(
            picked, picking.boards or {}, picking.latency_budget_ms, picking.board_latency_budget_ms, cell_href
        ),
        operators=operator_map(*operators) if operators else None,
        versions=vela_versions(rows, per_layer),
        plots=[{"name": n, "svg": inline_svg(plots[n]), "caption": CAPTIONS[n]} for n in PLOTS],
        tools=tool_versions(),
        firmware=firmware_footer(rows),
        datatables=generate_init_offline_itables_html(dt_bundle),
        cells_table=cells_table(rows, cell_href),
        cell_pages_linked=not inline,
        cpu=cpu_table(cpu_rows) if cpu_rows else None,
        cell_pages=list(by_model.items()),
    )


def write_index(
    summary: str,
    plots: Plots,
    cells: list[dict],
    cell_pages: str,
    sweep_text: str,
    index: str,
    tables: Tables = Tables(),
    picking: Picking = Picking(),
) -> None:
    """The page, from the summary, the plots and the cells' pages (report.smk's report_index)."""
    rows = read_summary_csv(summary)
    operator_tables = None
    if tables.operators and tables.operator_models:
        operator_tables = (read_summary_csv(tables.operators), read_summary_csv(tables.operator_models))
    svgs = {name: read_plot(getattr(plots, name)) for name in PLOTS}
    small = inlines_cell_pages(len(cells))  # a large sweep's page links to them instead
    pages = [(cell, (Path(cell_pages) / f"{cell_id(cell)}.html").read_text() if small else "") for cell in cells]
    per_layer = dict(zip([c["id"] for c in cells], tables.per_layer, strict=True)) if tables.per_layer else None
    cpu_rows = read_summary_csv(tables.cpu_summary) if tables.cpu_summary else []
    page = render_index(rows, svgs, pages, sweep_text, cpu_rows, per_layer, operator_tables, picking)
    atomic_write_text(index, page)
