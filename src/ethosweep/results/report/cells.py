"""A page per cell, as data then through its template: Vela's figures and top layers, the CPU's
part and the layout work, the numerics and the advice derived from the numbers (cell.html);
for a cell that did not compile, why, its log and its reproducer (failed_cell.html).

Every number is labelled by its source: cycles, times and memory are Vela's compiler estimates;
the numerics come from the verify stage (TOSA reference model); fit from the board profiles.
Torch-free.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ethosweep.matrix.boards import board_from_params, fit
from ethosweep.matrix.cell import Cell, cell_id
from ethosweep.results import advice as adv
from ethosweep.results.report.figures import inline_svg, plot_layer_errors
from ethosweep.results.report.glance import anchor
from ethosweep.results.report.render import render
from ethosweep.results.table import (
    NOT_VERIFIED,
    NOT_VERIFIED_REASON,
    cell_delegation,
    number,
    verification_of,
)
from ethosweep.runtime.io import atomic_write_text, read_json
from ethosweep.runtime.outcome import describe, failure_of

TOP_LAYER_COLUMNS = (
    "partition",
    "Original Operator",
    "Name",
    "Op Cycles",
    "NPU",
    "SRAM AC",
    "DRAM AC",
    "OffFlash AC",
    "MAC Count",
    "Util% (MAC)",
)


@dataclass(frozen=True)
class CellRecords:
    """The records one cell's page is drawn from (its stages' outputs)."""

    per_layer: str
    vela_summary: str
    delegation: str
    compile_meta: str
    verify_report: str | None
    fallback_report: str | None


# Vela's figures a cell's page shows
FIGURES = ("cycles_total", "cycles_npu", "inference_time_ms", "nn_macs", "sram_memory_used", "mac_utilisation")


def cell_detail(cell: dict, records: CellRecords, siblings: dict[str, str], top: int = 5) -> dict:
    """Everything the report shows about one cell, as data: top layers, CPU operators, advice."""
    with open(records.per_layer, newline="") as f:
        layers = list(csv.DictReader(f))
    figures = read_json(records.vela_summary)["cell"]
    lowered = read_json(records.compile_meta)
    table = cell_delegation(lowered, read_json(records.delegation))
    verified = verified_of(records.verify_report, lowered, cell_id(cell), records.fallback_report)
    sibling_figures = {mode: read_json(path)["cell"] for mode, path in siblings.items()}
    fits = _fits(cell, lowered, figures)
    advice = [
        *adv.cpu_operators(table),
        *adv.memory_bound_layers(layers),
        *adv.weight_streaming(cell, figures, sibling_figures),
        *adv.numerics(verified),
        *adv.board_fit(fits),
    ]
    top_layers = sorted(layers, key=lambda layer: -number(layer.get("Op Cycles"), 0))[:top]
    return {
        "cell": cell,
        "figures": {k: figures.get(k) for k in FIGURES},
        "top_layers": [{k: layer.get(k, "") for k in TOP_LAYER_COLUMNS} for layer in top_layers],
        "cpu_operators": table.get("cpu_operators", {}),
        "cpu_reasons": table.get("cpu_reasons", {}),
        # the CPU's part: its work from the tensors' shapes, the hand-overs, the kernels it needs
        "cpu_part": {
            "operators": table.get("cpu_compute_ops", 0),
            "macs": table.get("cpu_macs"),
            "tensor_bytes": table.get("cpu_tensor_bytes"),
            "switches": table.get("switches"),
            "kernels": lowered.get("cpu_kernels") or {},
        },
        "layout": figures.get("layout") or {},
        "fits": fits,
        "numerics": {
            **{k: verified[k] for k in ("metrics", "verdict", "reason", "layer")},
            # the quantization's question (against float), beside the NPU's
            "vs_float": verified.get("quantization") or {},
            "location": verified.get("location"),
            "worst_layers": verified.get("worst_layers", []),
        },
        "advice": [a.as_dict() for a in advice],
    }


def _fits(cell: dict, lowered: dict, figures: dict) -> list[dict]:
    """The cell's fit on each board it is compiled for."""
    pte, planned = lowered["pte_bytes"], lowered["planned_buffer_bytes"]
    return [
        {"board": b["name"], "fit": fit(board_from_params(b), cell["memory_mode"], pte, figures, planned).verdict}
        for b in cell.get("boards", [])
    ]


def verified_of(verify_report: str | None, lowered: dict, cell: str = "", fallback_report: str | None = None) -> dict:
    """The verification that holds for the cell (results.table.verification_of), or, with verification
    off (numerics.verify), that; or why it is unverified."""
    if verify_report is None:
        return {
            "verdict": NOT_VERIFIED,
            "reason": NOT_VERIFIED_REASON,
            "metrics": {},
            "layer": "",
        }
    verified, why = verification_of(lowered, cell, verify_report, fallback_report)
    if verified is None:
        return {"verdict": "unverified", "reason": why, "metrics": {}, "layer": ""}
    return verified


# the verify stage's measurements a cell page names (summary.csv has them all)
SHOWN_METRICS = (
    "top1_float",
    "top1_quantized",
    "top1_npu",
    "agreement_npu_vs_float",
    "max_error_steps",
    "cosine_npu_vs_float",
    "relative_error_npu_vs_float",
    "snr_db_npu_vs_float",
)


def title(record: dict) -> str:
    cell = Cell.of(record)
    title = f"{cell.model} · {cell.quant} · {cell.target} · {cell.system_config} · {cell.memory_mode}"
    return title + (f" · Vela {cell.vela_version}" if cell.vela_version else "")


def render_cell(detail: dict) -> str:
    numerics = detail["numerics"]
    location = numerics.get("location") or {}
    return render(
        "cell.html",
        **detail,
        title=title(detail["cell"]),
        anchor=anchor(detail["cell"]),
        cpu_part_text=cpu_part_text(detail["cpu_part"]),
        layout_text=layout_text(detail["layout"]),
        top_layer_columns=TOP_LAYER_COLUMNS,
        shown_metrics=[(k, v) for k, v in numerics["metrics"].items() if k in SHOWN_METRICS and v is not None],
        layer_errors=inline_svg(plot_layer_errors(location["layers"])) if location.get("layers") else None,
        location_problem=location.get("problem", ""),
    )


def render_failed_cell(cell: dict, row: dict) -> str:
    """The page of a cell that did not compile. `row`: its failure record (ethosweep.runtime.outcome)."""
    return render("failed_cell.html", title=title(cell), anchor=anchor(cell), reason=describe(row), record=row)


def cpu_part_text(cpu: dict) -> str:
    """'On the CPU: 1 operator(s), 9,600 MACs, 12.5 KiB of tensors read and written, 2 hand-overs
    between the NPU and the CPU; kernels: cortex_m 2, portable 1.' (or the kernels missing)."""
    kernels = cpu.get("kernels") or {}
    libraries: dict[str, int] = defaultdict(int)
    for library in (kernels.get("kernels") or {}).values():
        libraries[library] += 1
    found = ", ".join(f"{name} {count}" for name, count in sorted(libraries.items())) or "none needed"
    missing = kernels.get("missing") or []
    said = f"kernels in the runner's libraries: {found}" + (
        f"; no kernel for {', '.join(missing)}: the program will not load" if missing else ""
    )
    if not cpu.get("operators"):
        return f"Everything computes on the NPU; on the CPU only quantize/dequantize at the edges ({said})."
    work = [f"{cpu['operators']} operator(s)"]
    if cpu.get("macs"):
        work.append(f"{cpu['macs']:,} MACs")
    if cpu.get("tensor_bytes") is not None:
        work.append(f"{cpu['tensor_bytes'] / 1024:,.1f} KiB of tensors read and written")
    if cpu.get("switches") is not None:
        work.append(f"{cpu['switches']} hand-over(s) between the NPU and the CPU")
    return f"On the CPU: {', '.join(work)}; CPU time not estimated ({said})."


def layout_text(layout: dict) -> str:
    """'Layout work on the NPU (Vela): 2 transposes, 3.0 % of the cycles; no lone rescale.'"""
    if not layout:
        return "Layout work on the NPU: no per-layer report."
    said = []
    for name in ("transposes", "rescales"):
        count, share = layout.get(name, 0), layout.get(f"{name}_share")
        singular = name[:-1]
        said.append(
            f"{count} {name if count != 1 else singular}, {100 * share:.1f} % of the cycles"
            if count and share is not None
            else f"no lone {singular}"
        )
    return "Layout work on the NPU (Vela's per-layer report): " + "; ".join(said) + "."


def write_cell_reports(
    cells: list[dict],
    per_layer: list[str],
    vela_summary: list[str],
    delegation: list[str],
    compile_meta: list[str],
    verify_report: list[str],
    folder: str,
    fallback_report: list[str] | None = None,
) -> None:
    """Every cell's detail page, `folder`/<cell id>.html (the lists: one path per cell, in order).

    One job for all cells: a page takes milliseconds, a job of its own per cell cost more
    than the cell's Vela run. A failed cell's page says why, from the failure record its Vela
    job carries (ethosweep.runtime.outcome)."""
    modes = defaultdict(dict)  # (model, quant, target, system config, Vela) -> memory mode -> Vela summary
    for cell, path in zip(cells, vela_summary, strict=True):
        if failure_of(path) is None:
            modes[_configuration(cell)][cell["memory_mode"]] = path
    verify_report = verify_report or [None] * len(cells)  # numerics.verify off
    fallback_report = fallback_report or [None] * len(cells)
    columns = (per_layer, vela_summary, delegation, compile_meta, verify_report, fallback_report)
    for cell, *paths in zip(cells, *columns, strict=True):
        records = CellRecords(*paths)
        failed = failure_of(records.compile_meta)
        if failed is None:
            siblings = {m: path for m, path in modes[_configuration(cell)].items() if m != cell["memory_mode"]}
            page = render_cell(cell_detail(cell, records, siblings))
        else:
            page = render_failed_cell(cell, failed)
        atomic_write_text(Path(folder) / f"{cell_id(cell)}.html", standalone(cell, page))


def standalone(cell: dict, fragment: str) -> str:
    """A cell's page as a document of its own (the report links to it from a large sweep), its section
    between markers (a small sweep's report inlines it: render.fragment_of)."""
    depth = cell_id(cell).count("/") + 1  # below results/report/cells/
    return render("cell_page.html", title=title(cell), fragment=fragment, index="../" * depth + "index.html")


def _configuration(cell: dict) -> tuple[str, ...]:
    """What a cell shares with its siblings in other memory modes (the same Vela version)."""
    return cell["model"], cell["quant"], cell["target"], cell["system_config"], cell.get("vela_version", "")
