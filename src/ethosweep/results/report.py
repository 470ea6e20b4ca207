"""The report: plots, per-cell detail with advice, and one self-contained HTML page.

Plots are matplotlib SVGs, inlined in results/report/index.html: the page needs no server,
no JavaScript library and no network (nothing can be fetched here, and a report should open
anywhere), the figures stay sharp at any zoom, and the same SVGs are Snakemake report items.
Figures are written deterministically (fixed SVG ids, no dates), so unchanged inputs give
unchanged files.

Every number is labelled by its source: cycles, times and memory are Vela's compiler estimates;
accuracy comes from the verify stage (TOSA reference model); fit from the board profiles.
Torch-free.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from ethosweep.matrix.boards import board_from_params, fit
from ethosweep.results import advice as adv
from ethosweep.results.table import (
    NOT_VERIFIED,
    NOT_VERIFIED_REASON,
    cell_delegation,
    cell_id,
    firmware_footer,
    number,
    primary_rows,
    read_summary_csv,
    unique_cells,
    verification_of,
)
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.io import atomic_write_text, read_json
from ethosweep.runtime.outcome import describe, failure_of
from ethosweep.runtime.provenance import tool_versions

PLOTS = ("cycles", "fit", "roofline", "pareto")
CAPTIONS = {
    "cycles": "Inference time per cell, in milliseconds at the system config's clock (Vela's compiler estimate). "
    "Read across a row to pick a target and memory mode for a model; darker is slower (log scale).",
    "fit": "Fit on each board: the fullest memory region as a share of its size (.pte, Vela's memory use and the "
    "runner's planned buffers placed as the board's runner places them). Red cells do not fit.",
    "roofline": "NPU utilisation: achieved MACs per cycle against MACs per byte of memory traffic (Vela). The dashed "
    "lines are each accelerator's peak; a cell far below its line is limited by memory or by layers "
    "that use the MAC array poorly.",
    "pareto": "Per model: latency against memory (SRAM + flash/DRAM, Vela), coloured by top-1 accuracy on the NPU "
    "path where the model has labelled data. Circled cells are Pareto-optimal: nothing else is both "
    "faster and smaller.",
}


# ---- plots --------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"svg.hashsalt": "ethosweep", "font.size": 9, "axes.titlesize": 10, "figure.dpi": 100, "svg.fonttype": "none"}
    )
    return plt


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": "ethosweep"})
    _pyplot().close(fig)
    return buffer.getvalue()


# a figure of a matrix where no cell compiled (every cell failed: the report still opens)
NO_CELL_COMPILED = "No cell compiled: nothing to draw (the cells' pages say why)."


def _nothing_to_draw(message: str) -> str:
    fig, ax = _pyplot().subplots(figsize=(6, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    return _svg(fig)


def plot_cycles(rows: list[dict]) -> str:
    plt = _pyplot()
    cells = [r for r in unique_cells(rows) if r["status"] == "ok" and r.get("vela_inference_ms")]
    if not cells:
        return _nothing_to_draw(NO_CELL_COMPILED)
    models = list(dict.fromkeys(r["model"] for r in cells))
    columns = list(dict.fromkeys((r["target"], r["memory_mode"]) for r in cells))
    grid = [[math.nan] * len(columns) for _ in models]
    for r in cells:
        grid[models.index(r["model"])][columns.index((r["target"], r["memory_mode"]))] = max(
            number(r["vela_inference_ms"]), 1e-4
        )
    fig, ax = plt.subplots(figsize=(1.0 + 0.95 * len(columns), 0.9 + 0.42 * len(models)))
    import numpy as np

    data = np.ma.masked_invalid(np.array(grid, dtype=float))
    from matplotlib.colors import LogNorm

    image = ax.imshow(
        data, cmap="YlOrRd", norm=LogNorm(vmin=max(data.min(), 1e-4), vmax=max(data.max(), 1e-3)), aspect="auto"
    )
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if not math.isnan(value):
                ax.text(
                    j,
                    i,
                    _ms(value),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if value > math.sqrt(data.max() * max(data.min(), 1e-4)) * 4 else "black",
                )
    ax.set_xticks(range(len(columns)), [f"{t}\n{m}" for t, m in columns], rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(models)), models)
    ax.set_title("Inference time (ms, Vela estimate at the system config's clock)")
    fig.colorbar(image, ax=ax, label="ms (log)", shrink=0.8)
    return _svg(fig)


def _ms(value: float) -> str:
    return f"{value:.3g}" if value >= 0.001 else "<0.001"


def plot_fit(rows: list[dict], boards: dict[str, dict]) -> str:
    plt = _pyplot()
    cells = [r for r in rows if r.get("board") and r["status"] == "ok" and r.get("fit")]
    fig_height = 0.9 + 0.42 * max(1, len({r["model"] for r in cells}))
    if not cells:
        return _nothing_to_draw("No boards in the config (`boards:`): nothing to fit.")
    models = list(dict.fromkeys(r["model"] for r in cells))
    columns = list(dict.fromkeys((r["board"], r["memory_mode"]) for r in cells))
    import numpy as np

    grid = np.full((len(models), len(columns)), np.nan)
    labels = {}
    for r in cells:
        sizes = boards[r["board"]]["sizes_kib"]
        shares = {
            region: (sizes[region] - number(r.get(f"fit_{region}_margin_kib"))) / sizes[region]
            for region in ("sram", "flash", "dram")
            if sizes[region] and r.get(f"fit_{region}_margin_kib") not in ("", None)
        }
        if not shares:
            continue
        region, share = max(shares.items(), key=lambda kv: kv[1])
        i, j = models.index(r["model"]), columns.index((r["board"], r["memory_mode"]))
        grid[i, j] = share
        labels[i, j] = f"{region.upper()}\n{100 * share:.0f}%"
    from matplotlib.colors import BoundaryNorm, ListedColormap

    cmap = ListedColormap(["#4caf50", "#ffc107", "#e53935"])
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(columns), fig_height))
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=BoundaryNorm([0, 0.8, 1.0, 1e9], 3), aspect="auto")
    for (i, j), text in labels.items():
        ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(columns)), [f"{b}\n{m}" for b, m in columns], rotation=30, ha="right", fontsize=7)
    ax.set_yticks(range(len(models)), models)
    ax.set_title("Fullest memory region on each board (green < 80 %, amber < 100 %, red: does not fit)")
    return _svg(fig)


def plot_roofline(rows: list[dict]) -> str:
    plt = _pyplot()
    cells = [
        r
        for r in unique_cells(rows)
        if r["status"] == "ok" and number(r.get("vela_macs"), 0) > 0 and number(r.get("vela_cycles_total"), 0) > 0
    ]
    if not cells:
        return _nothing_to_draw(NO_CELL_COMPILED)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    targets = sorted({r["target"] for r in cells}, key=lambda t: (t.split("-")[1], int(t.split("-")[-1])))
    markers = {"Shared_Sram": "o", "Sram_Only": "s"}
    colors = {t: c for t, c in zip(targets, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3)}
    for r in cells:
        traffic = number(r.get("vela_traffic_kib"), 0) * 1024
        if traffic <= 0:
            continue
        x = number(r["vela_macs"]) / traffic
        y = number(r["vela_macs"]) / number(r["vela_cycles_total"])
        ax.scatter(
            x,
            y,
            color=colors[r["target"]],
            marker=markers.get(r["memory_mode"], "^"),
            s=28,
            alpha=0.85,
            edgecolors="black",
            linewidths=0.3,
        )
    for t in targets:
        peak = int(t.rsplit("-", 1)[-1])
        ax.axhline(peak, color=colors[t], linestyle="--", linewidth=1)
        ax.text(
            0.02,
            peak,
            f" {t} peak {peak}",
            color=colors[t],
            fontsize=7,
            va="bottom",
            transform=ax.get_yaxis_transform(),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MACs per byte of memory traffic (Vela)")
    ax.set_ylabel("achieved MACs per cycle (Vela)")
    ax.set_title("Where each cell sits under its accelerator's peak")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[t], marker="o", linestyle="", label=t) for t in targets]
    handles += [Line2D([], [], color="grey", marker=m, linestyle="", label=mode) for mode, m in markers.items()]
    handles += [Line2D([], [], color="grey", marker="^", linestyle="", label="dedicated SRAM modes")]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    return _svg(fig)


def plot_layer_errors(layers: list[dict]) -> str:
    """Per layer: its own difference from the quantized model and the accumulated one, in steps."""
    # every cell of a (model, scheme, TOSA profile) shows its verify stage's plot: drawn once
    return _plot_layer_errors(json.dumps(layers, sort_keys=True))


@lru_cache(maxsize=16)
def _plot_layer_errors(layers_json: str) -> str:
    layers = json.loads(layers_json)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.22 * len(layers) + 2), 2.6))
    x = range(len(layers))
    ax.plot(x, [layer["accumulated_steps"] for layer in layers], marker=".", label="accumulated (from the input on)")
    ax.plot(x, [layer["own_steps"] for layer in layers], marker="o", label="own (given the same inputs)")
    ax.set_xticks(list(x), [layer["layer"] for layer in layers], rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("steps")
    ax.legend(fontsize=7)
    ax.set_title("Where the NPU path and the quantized model part ways", fontsize=9)
    return _svg(fig)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (lower is better)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((a <= x and b <= y) and (a < x or b < y) for j, (a, b) in enumerate(points) if j != i):
            front.append(i)
    return front


def plot_pareto(rows: list[dict]) -> str:
    plt = _pyplot()
    cells = [r for r in unique_cells(rows) if r["status"] == "ok" and r.get("vela_inference_ms")]
    if not cells:
        return _nothing_to_draw(NO_CELL_COMPILED)
    models = list(dict.fromkeys(r["model"] for r in cells))
    columns = 3
    rows_n = max(1, math.ceil(len(models) / columns))
    fig, axes = plt.subplots(rows_n, columns, figsize=(11, 3.0 * rows_n), squeeze=False)
    for ax in axes.flat[len(models) :]:
        ax.axis("off")
    for ax, model in zip(axes.flat, models):
        mine = [r for r in cells if r["model"] == model]
        points = [(max(number(r["vela_inference_ms"]), 1e-5), _memory_kib(r)) for r in mine]
        accuracy = [number(r.get("top1_npu")) for r in mine]
        has_accuracy = not all(math.isnan(a) for a in accuracy)
        scatter = ax.scatter(
            [p[0] for p in points],
            [p[1] for p in points],
            c=accuracy if has_accuracy else "grey",
            cmap="viridis",
            s=30,
            vmin=0.0,
            vmax=1.0,
        )
        for i in pareto_front(points):
            ax.scatter(*points[i], s=110, facecolors="none", edgecolors="black", linewidths=1)
            ax.annotate(
                f"{mine[i]['target'].removeprefix('ethos-')}\n{mine[i]['memory_mode']}",
                points[i],
                fontsize=6,
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())  # log minor labels collide on narrow ranges
        ax.set_title(model)
        ax.set_xlabel("ms (Vela)")
        ax.set_ylabel("KiB (SRAM + flash/DRAM)")
        if has_accuracy:
            fig.colorbar(scatter, ax=ax, label="top-1 (NPU path)")
    fig.suptitle("Latency against memory per model (circled: Pareto-optimal)")
    fig.tight_layout()
    return _svg(fig)


def _memory_kib(row: dict) -> float:
    return sum(
        number(row.get(k), 0.0)
        for k in ("vela_sram_kib", "vela_off_chip_flash_kib", "vela_on_chip_flash_kib", "vela_dram_kib")
    )


def write_plots(summary: str, boards: dict[str, dict], outputs: dict[str, str]) -> None:
    rows = primary_rows(read_summary_csv(summary))  # one figure per cell: the installed Vela's
    drawn = {
        "cycles": lambda: plot_cycles(rows),
        "fit": lambda: plot_fit(rows, boards),
        "roofline": lambda: plot_roofline(rows),
        "pareto": lambda: plot_pareto(rows),
    }
    for name, path in outputs.items():
        atomic_write_text(path, drawn[name]())


# ---- per-cell detail ------------------------------------------------------------------------


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


def cell_detail(
    cell: dict,
    per_layer: str,
    vela_summary: str,
    delegation: str,
    compile_meta: str,
    verify_report: str,
    fallback_report: str | None,
    siblings: dict[str, str],
    top: int = 5,
) -> dict:
    """Everything the report shows about one cell, as data: top layers, CPU operators, advice."""
    with open(per_layer, newline="") as f:
        layers = list(csv.DictReader(f))
    figures = read_json(vela_summary)["cell"]
    lowered = read_json(compile_meta)
    table = cell_delegation(lowered, read_json(delegation))
    verified = _verified(verify_report, lowered, cell_id(cell), fallback_report)
    sibling_figures = {mode: read_json(path)["cell"] for mode, path in siblings.items()}
    fits = [
        {
            "board": b["name"],
            "fit": fit(
                board_from_params(b),
                cell["memory_mode"],
                lowered["pte_bytes"],
                figures,
                lowered["planned_buffer_bytes"],
            ).verdict,
        }
        for b in cell.get("boards", [])
    ]
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
        "figures": {
            k: figures.get(k)
            for k in (
                "cycles_total",
                "cycles_npu",
                "inference_time_ms",
                "nn_macs",
                "sram_memory_used",
                "mac_utilisation",
            )
        },
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
            "metrics": verified["metrics"],
            "verdict": verified["verdict"],
            "reason": verified["reason"],
            "layer": verified["layer"],
            "location": verified.get("location"),
            "worst_layers": verified.get("worst_layers", []),
        },
        "advice": [a.as_dict() for a in advice],
    }


def _verified(verify_report: str | None, lowered: dict, cell: str = "", fallback_report: str | None = None) -> dict:
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


def _title(cell: dict) -> str:
    title = f"{cell['model']} · {cell['quant']} · {cell['target']} · {cell['system_config']} · {cell['memory_mode']}"
    return title + (f" · Vela {cell['vela_version']}" if "@vela-" in cell_id(cell) else "")


def render_failed_cell(cell: dict, row: dict) -> str:
    """The page of a cell that did not compile: why, where its log is, and how to reproduce it.
    `row`: its failure record (ethosweep.runtime.outcome)."""
    parts = [
        f'<section class="cell failed" id="{_anchor(cell)}"><h4>{_e(_title(cell))}</h4>',
        f'<p><span class="verdict v-failed">failed</span> {_e(describe(row))}</p>',
    ]
    if row.get("log"):
        parts.append(f"<p>The failing stage's log (traceback, the tool's output): <code>{_e(row['log'])}</code></p>")
    if row.get("reproducer"):
        parts.append(
            f"<p>Reproducer (the partition's TOSA, the vela.ini and the exact command): <code>{_e(row['reproducer'])}"
            f"</code>; rerun it with <code>uv run sh {_e(row['reproducer'])}command.sh</code>, as its README.txt "
            "says.</p>"
        )
    parts.append(
        "<p>The failure is recorded: a rerun keeps it until something it depends on changes (the model, "
        "its config, ethosweep's code, the tools' versions). Fix the cause and run <code>uv run snakemake "
        "--cores 8</code> again: only this cell's failed stage and what follows from it run, and this report "
        "is written again.</p></section>"
    )
    return "\n".join(parts)


def render_cell(detail: dict) -> str:
    cell, figures = detail["cell"], detail["figures"]
    title = _title(cell)
    cpu = detail.get("cpu_part") or {}
    part = " for the NPU part (the CPU's part is not timed)" if cpu.get("operators") else ""
    parts = [
        f'<section class="cell" id="{_anchor(cell)}"><h4>{_e(title)}</h4>',
        f'<p class="figures">Vela: {int(figures["cycles_total"] or 0):,} cycles ({int(figures["cycles_npu"] or 0):,} '
        "NPU), "
        f"{number(figures['inference_time_ms']):.3f} ms{_e(part)}, {int(figures['nn_macs'] or 0):,} MACs, "
        f"{number(figures['sram_memory_used']):.1f} KiB SRAM, MAC utilisation "
        f"{100 * number(figures['mac_utilisation'], 0):.1f} %.</p>",
        f'<p class="cpu-part">{_e(cpu_part_text(cpu))}</p>',
        f'<p class="layout">{_e(layout_text(detail.get("layout") or {}))}</p>',
    ]
    if detail["advice"]:
        parts.append(
            '<ul class="advice">'
            + "".join(f"<li><b>{_e(a['title'])}</b> — {_e(a['detail'])}</li>" for a in detail["advice"])
            + "</ul>"
        )
    else:
        parts.append(
            '<p class="advice-none">No advice: every operator is on the NPU, no top layer is memory-bound, '
            "and the numerics pass.</p>"
        )
    if detail["top_layers"]:
        parts.append(
            '<table class="layers"><caption>Top layers by cycles (Vela per-layer estimate)</caption><tr>'
            + "".join(f"<th>{_e(c)}</th>" for c in TOP_LAYER_COLUMNS)
            + "</tr>"
        )
        for layer in detail["top_layers"]:
            parts.append("<tr>" + "".join(f"<td>{_e(_fmt(layer[c]))}</td>" for c in TOP_LAYER_COLUMNS) + "</tr>")
        parts.append("</table>")
    numerics = detail["numerics"]
    if numerics["metrics"]:
        shown = {
            k: v
            for k, v in numerics["metrics"].items()
            if k
            in (
                "top1_float",
                "top1_quantized",
                "top1_npu",
                "agreement_npu_vs_float",
                "max_error_steps",
                "cosine_npu_vs_float",
                "relative_error_npu_vs_float",
                "snr_db_npu_vs_float",
            )
            and v is not None
        }
        parts.append(
            f'<p class="numerics">Numerics (verify stage, TOSA reference model): <b>{_e(numerics["verdict"])}</b>'
            + (f" — {_e(numerics['reason'])}" if numerics["reason"] else "")
            + ". "
            + ", ".join(f"{_e(k)} {_fmt(v)}" for k, v in shown.items())
            + ".</p>"
        )
    location = numerics.get("location") or {}
    if location.get("layers"):
        parts.append(
            '<figure class="layer-errors">'
            + _strip_xml_header(plot_layer_errors(location["layers"]))
            + "<figcaption>NPU path (TOSA reference model) against the quantized model, layer by layer, on the "
            "sample where the outputs differ most, in steps of each layer's own quantization scale: given the "
            "same inputs (the layer's own difference) and from the model's input on (accumulated).</figcaption>"
            "</figure>"
        )
    elif location.get("problem"):
        parts.append(f'<p class="numerics">No layer-by-layer comparison: {_e(location["problem"])}</p>')
    parts.append("</section>")
    return "\n".join(parts)


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


def _fmt(value) -> str:
    figure = number(value)
    if math.isnan(figure):
        return str(value)
    if figure.is_integer() and abs(figure) >= 1000:
        return f"{int(figure):,}"
    return f"{figure:.4g}"


def _anchor(cell: dict) -> str:
    """The id of a cell's detail section (from a cell record or a summary row)."""
    return "cell-" + cell_id(cell).replace("/", "-")


def _e(text) -> str:
    return html.escape(str(text))


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
        failed = failure_of(paths[3])
        if failed is None:
            siblings = {m: path for m, path in modes[_configuration(cell)].items() if m != cell["memory_mode"]}
            page = render_cell(cell_detail(cell, *paths, siblings))
        else:
            page = render_failed_cell(cell, failed)
        atomic_write_text(Path(folder) / f"{cell_id(cell)}.html", page)


def _configuration(cell: dict) -> tuple[str, ...]:
    """What a cell shares with its siblings in other memory modes (the same Vela version)."""
    return cell["model"], cell["quant"], cell["target"], cell["system_config"], cell.get("vela_version", "")


# ---- the page -------------------------------------------------------------------------------

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;
     margin:2rem auto;max-width:1400px;color:#222;padding:0 1rem}
h1{margin-bottom:.2rem} .sub{color:#555;margin-top:0}
table{border-collapse:collapse;font-size:12px;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
table.cells td,table.cells th{white-space:nowrap}
figure{margin:1.5rem 0} figcaption{color:#444;font-size:13px;max-width:900px}
section.cell{border-top:1px solid #eee;padding:.3rem 0} ul.advice li{margin:.2rem 0}
details>summary{cursor:pointer;font-weight:600;margin:.4rem 0}
.note{background:#f6f8fa;padding:.6rem .8rem;border-radius:4px;font-size:13px}
section.pick{margin:.8rem 0 1.4rem}
section.pick h3{margin:.2rem 0}
section.pick table td{text-align:left;white-space:normal}
section.pick td.model{font-weight:600;white-space:nowrap} .verdict{white-space:nowrap;border-radius:3px;padding:1px 5px}
.v-fits,.v-meets-budget,.v-fastest{background:#dff3e3} .v-misses-budget{background:#fff3cd}
.v-does-not-fit,.v-failed{background:#fde2e1}
ul.versions{font-size:13px} ul.versions li{margin:.15rem 0} li.regression{background:#fde2e1}
"""

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
    ("numerics", "numerics"),
    ("numerics_reason", "numerics: why"),
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


def _cpu_section(cpu_rows: list[dict]) -> list[str]:
    """The CPU-only cells: what the model costs without an NPU, and whether its firmware ran."""
    if not cpu_rows:
        return []
    head = "".join(f'<th class="l">{_e(label)}</th>' for _, label in CPU_TABLE_COLUMNS)
    body = [
        "<tr>"
        + "".join(
            f'<td class="l">{_e(_fmt(r.get(key, "")) if key.endswith(("bytes", "ops")) else r.get(key, ""))}</td>'
            for key, _ in CPU_TABLE_COLUMNS
        )
        + "</tr>"
        for r in cpu_rows
    ]
    return [
        '<h2 id="cpu-only">CPU only (no NPU)</h2>',
        '<p class="note">Each model for the Cortex-M CPU alone with ExecuTorch\'s Cortex-M backend (CMSIS-NN '
        "int8 kernels, portable kernels for the rest). QEMU runs check the firmware's outputs against the "
        "PyTorch reference; QEMU is not cycle-accurate, so no time is given.</p>",
        f'<table class="summary"><tr>{head}</tr>' + "".join(body) + "</table>",
    ]


def _pick_sections(rows: list[dict], boards: dict[str, dict], budget_ms, board_budgets) -> list[str]:
    """'What to pick': per board, then for the bare targets (ethosweep.results.recommend)."""
    from ethosweep.results import recommend

    sections = recommend.board_sections(rows, boards, budget_ms, board_budgets)
    bare = recommend.bare_section(rows, budget_ms)
    parts = [
        '<h2 id="pick">What to pick</h2>',
        '<p class="note">Per board: the models that fit its memories and, for each, the fastest memory mode that '
        "fits (Vela's cycles at the board's NPU clock). Per model on no board: the fastest configuration and, with "
        "a latency budget (<code>report.latency_budget_ms</code>), the smallest NPU meeting it. Times are Vela's "
        "compiler estimates; accuracy is the verify stage's, where the model has labelled data.</p>",
    ]
    for section in [*sections, *([bare] if bare else [])]:
        budget = f"; budget {section.budget_ms:g} ms" if section.budget_ms is not None else ""
        parts.append(
            f'<section class="pick"><h3>{_e(section.title)}</h3><p>{_e(section.summary)}{_e(budget)}</p><table>'
        )
        for pick in section.picks:
            anchor = f' <a href="#{_anchor(pick.row)}">detail</a>' if pick.row else ""
            parts.append(
                f'<tr><td class="model">{_e(pick.model)}</td><td><span class="verdict '
                f'v-{pick.verdict.replace(" ", "-")}">'
                f"{_e(pick.verdict)}</span></td><td>{_e(pick.text)}{anchor}</td></tr>"
            )
        parts.append("</table></section>")
    return parts


def _operators_section(operators: list[dict], models: list[dict]) -> list[str]:
    """'Operators': what holds models back, per NPU family and scheme, then each model's share on the NPU."""
    held = [r for r in operators if int(r["models_held_back"] or 0)]
    parts = [
        '<h2 id="operators">Operators: what runs where</h2>',
        '<p class="note">Every operator of the zoo as ExecuTorch\'s partitioner saw it, per NPU family (Ethos-U55 '
        "and -U65 share a TOSA profile) and scheme: on the NPU, on the CPU, or both (on the NPU for some models, "
        "left on the CPU for others), with the partitioner's reason and the models it holds back, most first; "
        "where the reason is a documented limit of the NPU, the way round it. Full tables: "
        "<code>results/operators.csv</code>, <code>results/operator_models.csv</code>.</p>",
    ]
    if held:
        parts.append(
            "<table><tr>"
            + "".join(
                f"<th>{h}</th>" for h in ("operator", "NPU", "scheme", "where", "models held back", "why", "way round")
            )
            + "</tr>"
        )
        for r in held:
            parts.append(
                "<tr>"
                + "".join(
                    f'<td class="l">{_e(v)}</td>'
                    for v in (
                        r["operator"],
                        r["family"],
                        r["scheme"],
                        r["where"],
                        f"{r['models_held_back']}: {r['held_back']}",
                        r["reason"],
                        r["way_round"],
                    )
                )
                + "</tr>"
            )
        parts.append("</table>")
    else:
        parts.append("<p>Every operator of every model runs on the NPU, for every family and scheme.</p>")
    on_npu = sorted({r["operator"] for r in operators if r["where"] == "NPU"})
    if on_npu:
        parts.append(
            f"<details><summary>On the NPU everywhere ({len(on_npu)})</summary><p>{_e(', '.join(on_npu))}</p></details>"
        )
    parts.append(
        "<table><caption>Per model: its compute on the NPU (MACs: Vela's on the NPU against those left on the "
        "CPU) and how often its program passes between NPU and CPU</caption><tr>"
        + "".join(
            f"<th>{h}</th>"
            for h in ("model", "NPU", "scheme", "delegated", "NPU / CPU ops", "MACs on the NPU", "NPU-CPU switches")
        )
        + "</tr>"
    )
    for r in models:
        share = f"{r['npu_mac_share_pct']} %" if r["npu_mac_share_pct"] not in ("", None) else ""
        values = (
            r["model"],
            r["family"],
            r["scheme"],
            r["delegated"],
            f"{r['npu_ops']} / {r['cpu_compute_ops']}",
            share,
            r["npu_cpu_switches"],
        )
        parts.append("<tr>" + "".join(f'<td class="l">{_e(v)}</td>' for v in values) + "</tr>")
    parts.append("</table>")
    return parts


def _vela_versions_section(rows: list[dict], per_layer: dict[str, str] | None) -> list[str]:
    """'Vela versions': with several versions swept, what each changes per model and target against
    the oldest, largest changes first, regressions named, and the layer whose cycles moved most."""
    from ethosweep.results import vela_versions as vv

    changes = vv.compare_versions(rows, per_layer=per_layer)
    if not changes:
        return []
    versions = vv.versions_in(rows)
    parts = [
        '<h2 id="vela-versions">Vela versions</h2>',
        f'<p class="note">Every cell compiled by Vela {", ".join(versions[:-1])} and {versions[-1]} from the same '
        f"TOSA with the same flags; each line compares a version with {changes[0].base_version}, over the "
        "memory modes of the model on that target, largest changes first. The figures are each version's own "
        "compiler estimates: a change is a change in Vela's performance model or its compiled command stream, "
        f"not a measurement. A change below {vv.NOISE_PCT} % counts as unchanged; a rise in cycles, SRAM or "
        "flash, or a cell that no longer compiles, is named a regression.</p>",
        '<ul class="versions">',
    ]
    for change in [c for c in changes if not c.unchanged]:
        css = ' class="regression"' if change.regressions else ""
        parts.append(f"<li{css}>{_e(change.sentence())}</li>")
    if vv.unchanged_line(changes):
        parts.append(f"<li>{_e(vv.unchanged_line(changes))}</li>")
    parts.append("</ul>")
    header = ["model", "q", "target", "memory mode"]
    for label in ("cycles", "SRAM KiB", "flash+DRAM KiB"):
        header += [f"{label} {changes[0].base_version}", "new", "change"]
    parts.append(
        "<details><summary>Per cell, with the layer whose cycles moved most</summary><table><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in [*header, "Vela", "status", "layer that moved most"])
        + "</tr>"
    )
    for change in changes:
        for cell in change.cells:
            values = [change.model, change.quant, change.target, cell.key[-1]]
            for figure, _ in vv.FIGURES:
                old, new = vv.figure_of(cell.base, figure), vv.figure_of(cell.new, figure)
                pct = cell.changes.get(figure)
                values += [
                    *("" if math.isnan(v) else _fmt(v) for v in (old, new)),
                    "" if pct is None else f"{pct:+.1f} %",
                ]
            values += [change.new_version, cell.status_change or cell.new.get("status", ""), cell.layer]
            parts.append("<tr>" + "".join(f'<td class="l">{_e(v)}</td>' for v in values) + "</tr>")
    parts.append("</table></details>")
    return parts


def cells_table(rows: list[dict]) -> str:
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
                value = f'<span title="{_e(value)}">{_e(value[:60] + ("…" if len(value) > 60 else ""))}</span>'
            elif isinstance(value, str):
                value = _e(value)
            record[label] = value
        record["detail"] = f'<a href="#{_anchor(r)}">detail</a>'
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
        columnDefs=[{"className": "dt-left", "targets": text_columns}],
        lengthMenu=[10, 25, 100, 500],
        maxBytes=0,
        display_logo_when_loading=False,
        columnControl=["order", "searchDropdown"],
        text_in_header_can_be_selected=False,  # a header click sorts
        # search first; not itables' default layout, which it hides on tables shorter than a page
        layout={"topStart": "search", "topEnd": "pageLength", "bottomStart": "info", "bottomEnd": "paging"},
    )


def render_index(
    rows: list[dict],
    plots: dict[str, str],
    fragments: list[tuple[dict, str]],
    sweep_text: str,
    cpu_rows: list[dict] | None = None,
    boards: dict[str, dict] | None = None,
    budget_ms: float | None = None,
    board_budgets: dict[str, float] | None = None,
    per_layer: dict[str, str] | None = None,
    operator_map: tuple[list[dict], list[dict]] | None = None,
    opens_on: str = "pick",
) -> str:
    from itables.javascript import generate_init_offline_itables_html
    from itables.options import dt_bundle

    versions = tool_versions()
    failed = [r for r in rows if r["status"] != "ok"]
    nofit = [r for r in rows if r.get("fit", "").startswith("does not fit")]
    numerics = {
        v: unique_cells([r for r in rows if r.get("numerics") == v]) for v in ("flagged", "inconclusive", "unverified")
    }
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>ethosweep report</title>',
        f"<style>{STYLE}</style></head><body>",
        "<h1>ethosweep report</h1>",
        f'<p class="sub">{_e(sweep_text)}</p>',
        f"<p><b>{len(unique_cells(rows)) - len(unique_cells(failed))} of {len(unique_cells(rows))} cells compiled</b>; "
        f"{len(nofit)} board placements do not fit; " + _numerics_heading(rows, numerics) + ".</p>",
        *(_operators_section(*operator_map) if operator_map and opens_on == "operators" else []),
        *_pick_sections(primary_rows(rows), boards or {}, budget_ms, board_budgets),
        *(_operators_section(*operator_map) if operator_map and opens_on != "operators" else []),
        *_vela_versions_section(rows, per_layer),
        "<h2>Plots</h2>",
    ]
    for name in PLOTS:
        parts.append(
            f'<figure id="plot-{name}">{_strip_xml_header(plots[name])}'
            f"<figcaption>{_e(CAPTIONS[name])}</figcaption></figure>"
        )
    parts += [
        '<h2 id="all-cells">All cells</h2>',
        "<p class=\"note\">Sort by a column's header, filter with the search box or a column's menu; a cell on "
        "several boards has a row per board. Cycles, times and memory are <b>Vela's compiler estimates</b>; accuracy "
        "and the numerics verdict come from the verify stage (float PyTorch, quantized PyTorch and the TOSA "
        "reference model); fit from the board profiles. Tools: "
        + ", ".join(f"{_e(k)} {_e(v)}" for k, v in versions.items())
        + ".</p>",
        *[f'<p class="note firmware">{_e(line)}</p>' for line in firmware_footer(rows)],
        generate_init_offline_itables_html(dt_bundle),
        cells_table(rows),
        *_cpu_section(cpu_rows or []),
        "<h2>Cells</h2><p>Per cell: Vela's top layers, what stayed on the CPU, the numerics, and advice derived from "
        "the numbers.</p>",
    ]
    by_model = defaultdict(list)
    for cell, fragment in fragments:
        by_model[cell["model"]].append(fragment)
    for model, items in by_model.items():
        parts.append(f"<details><summary>{_e(model)} ({len(items)} cells)</summary>" + "\n".join(items) + "</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _numerics_heading(rows: list[dict], numerics: dict) -> str:
    if rows and all(r.get("numerics") == NOT_VERIFIED for r in rows if r.get("status") == "ok"):
        return f"numerics {NOT_VERIFIED} ({NOT_VERIFIED_REASON})"
    return f"numerics: {len(numerics['flagged'])} cells flagged, {len(numerics['inconclusive'])} inconclusive" + (
        f", {len(numerics['unverified'])} unverified" if numerics["unverified"] else ""
    )


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    if start < 0:  # a failure record, or anything else that is not a plot, is never shown as one
        raise StageError(f"not an SVG plot: {svg[:80]!r}")
    return svg[start:]


def read_plot(path: str) -> str:
    """A plot the report embeds; a failure record in its place fails the report (an aggregate's
    inputs are made by aggregates, which fail as jobs: such a record is never content)."""
    if failure_of(path) is not None:
        raise StageError(f"{path} holds a failure record, not a plot: {describe(failure_of(path))}")
    return Path(path).read_text()


def write_index(
    summary: str,
    plots: dict[str, str],
    cells: list[dict],
    cell_pages: str,
    sweep_text: str,
    index: str,
    cpu_summary: str | None = None,
    boards: dict[str, dict] | None = None,
    budget_ms: float | None = None,
    board_budgets: dict[str, float] | None = None,
    per_layer: dict[str, str] | None = None,
    operators: str | None = None,
    operator_models: str | None = None,
    opens_on: str = "pick",
) -> None:
    rows = read_summary_csv(summary)
    operator_map = (
        (read_summary_csv(operators), read_summary_csv(operator_models)) if operators and operator_models else None
    )
    cpu_rows = read_summary_csv(cpu_summary) if cpu_summary else []
    svgs = {name: read_plot(path) for name, path in plots.items()}
    pairs = [(cell, (Path(cell_pages) / f"{cell_id(cell)}.html").read_text()) for cell in cells]
    atomic_write_text(
        index,
        render_index(
            rows, svgs, pairs, sweep_text, cpu_rows, boards, budget_ms, board_budgets, per_layer, operator_map, opens_on
        ),
    )
