"""The report's figures: matplotlib SVGs, inlined in the page (drawn by the report_plots job,
ethosweep.results.report.plots, and for each cell's layer errors by its page).

The page needs no server, no JavaScript library and no network (nothing can be fetched here,
and a report should open anywhere), the figures stay sharp at any zoom, and the same SVGs are
Snakemake report items. Figures are written deterministically (fixed SVG ids, no dates), so
unchanged inputs give unchanged files. Every axis says its source: Vela's estimates are labelled
as such. Torch-free.
"""

from __future__ import annotations

import io
import json
import math
from functools import lru_cache
from pathlib import Path

from ethosweep.results.report.glance import MAX_MATRIX_COLUMNS
from ethosweep.results.report.render import ms
from ethosweep.results.table import number, unique_cells
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.outcome import describe, failure_of

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


# Past this many cells a scatter's points are drawn as an image inside the SVG (the axes and text stay
# vector): thousands of vector markers made the page's SVGs megabytes and its parsing seconds
RASTERIZED_POINTS = 500
# Past this many squares the heatmap's colour says it; a number in each would be unreadable and heavy
MAX_LABELLED_CELLS = 400


def _timed_cells(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The compiled cells Vela timed, and their models in the summary's order."""
    cells = [r for r in unique_cells(rows) if r["status"] == "ok" and r.get("vela_inference_ms")]
    return cells, list(dict.fromkeys(r["model"] for r in cells))


def plot_cycles(rows: list[dict]) -> str:
    plt = _pyplot()
    cells, models = _timed_cells(rows)
    if not cells:
        return _nothing_to_draw(NO_CELL_COMPILED)
    # the whole configuration space: a column per target, its fastest memory mode (as the page's matrix)
    by_target = len({(r["target"], r["memory_mode"]) for r in cells}) > MAX_MATRIX_COLUMNS
    column = (lambda r: (r["target"], "fastest mode")) if by_target else (lambda r: (r["target"], r["memory_mode"]))  # noqa: E731
    columns = list(dict.fromkeys(column(r) for r in cells))
    grid = [[math.nan] * len(columns) for _ in models]
    for r in cells:
        i, j = models.index(r["model"]), columns.index(column(r))
        value = max(number(r["vela_inference_ms"]), 1e-4)
        grid[i][j] = value if math.isnan(grid[i][j]) else min(grid[i][j], value)
    fig, ax = plt.subplots(figsize=(1.0 + 0.95 * len(columns), 0.9 + 0.42 * len(models)))
    import numpy as np

    data = np.ma.masked_invalid(np.array(grid, dtype=float))
    from matplotlib.colors import LogNorm

    image = ax.imshow(
        data, cmap="YlOrRd", norm=LogNorm(vmin=max(data.min(), 1e-4), vmax=max(data.max(), 1e-3)), aspect="auto"
    )
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if not math.isnan(value) and len(models) * len(columns) <= MAX_LABELLED_CELLS:
                ax.text(
                    j,
                    i,
                    ms(value),
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
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in cells:
        traffic = number(r.get("vela_traffic_kib"), 0) * 1024
        if traffic > 0:
            x = number(r["vela_macs"]) / traffic
            y = number(r["vela_macs"]) / number(r["vela_cycles_total"])
            points.setdefault((r["target"], r["memory_mode"]), []).append((x, y))
    for (target, mode), xy in points.items():  # one scatter per target and mode: thousands of cells stay light
        ax.scatter(
            [x for x, _ in xy],
            [y for _, y in xy],
            color=colors[target],
            marker=markers.get(mode, "^"),
            s=28,
            alpha=0.85,
            edgecolors="black",
            linewidths=0.3,
            rasterized=len(cells) > RASTERIZED_POINTS,
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
    cells, models = _timed_cells(rows)
    if not cells:
        return _nothing_to_draw(NO_CELL_COMPILED)
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
            s=30,
            rasterized=len(cells) > RASTERIZED_POINTS,
            **({"c": accuracy, "cmap": "viridis", "vmin": 0.0, "vmax": 1.0} if has_accuracy else {"c": "grey"}),
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


def inline_svg(svg: str) -> str:
    """An SVG file's text as an element of the page (its XML declaration dropped)."""
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
