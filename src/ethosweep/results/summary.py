"""Stage 6, summary: one row per cell in results/summary.csv (the terminal's table of it:
ethosweep.results.terminal).

Column prefixes say where a number comes from: `vela_` columns are Vela's
compiler estimates, `pte_`/`delegation` columns are facts of the compiled
program. Every row carries the tool versions and the parameters that produced it.
Torch-free.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from ethosweep.firmware.kernels import will_not_load
from ethosweep.matrix.boards import board_from_params, fit
from ethosweep.matrix.cell import cell_id
from ethosweep.results.table import (
    DOES_NOT_FIT,
    KEY_COLUMNS,
    NOT_VERIFIED,
    NOT_VERIFIED_REASON,
    cell_delegation,
    verification_of,
    verified_path,
)
from ethosweep.runtime.io import atomic_write_text, read_json
from ethosweep.runtime.outcome import describe, failure_of
from ethosweep.runtime.provenance import VERSION_COLUMNS, tool_versions, version_columns

# The verify stage's figures, as the summary carries them.
NUMERIC_COLUMNS = (
    "top1_float",
    "top1_quantized",
    "top1_npu",
    "agreement_npu_vs_float",
    "max_error_steps",
    "mean_error_steps",
    "cosine_npu_vs_float",
    "relative_error_npu_vs_float",
    "snr_db_npu_vs_float",
)

COLUMNS = KEY_COLUMNS + [
    # what the model is for (the config's `task`): how the report and `ethosweep picks` group models
    "task",
    "status",
    "reason",
    "delegation",
    "partitions",
    "npu_ops",
    "cpu_ops",
    "cpu_operators",
    # the CPU's part of the cell: its multiply-accumulates and the bytes its operators read and write
    # (from the tensors' shapes), the hand-overs between the NPU and the CPU, and the CPU kernels the
    # runner has no kernel for (ethosweep.firmware.kernels)
    "cpu_macs",
    "cpu_tensor_kib",
    "npu_cpu_switches",
    "cpu_kernels_missing",
    "vela_macs",
    "vela_cycles_total",
    "vela_cycles_npu",
    "vela_inference_ms",
    # what Vela's time covers: the whole model, or the NPU part only (the CPU's time is not estimated)
    "vela_time_covers",
    # the layout work the lowering adds on the NPU (Vela's per-layer report): transposes, lone rescales
    "vela_transposes",
    "vela_transpose_cycles_pct",
    "vela_rescales",
    "vela_rescale_cycles_pct",
    "vela_inferences_per_s",
    "vela_mac_utilisation_pct",
    "vela_sram_kib",
    "vela_off_chip_flash_kib",
    "vela_on_chip_flash_kib",
    "vela_dram_kib",
    "vela_core_clock_mhz",
    "vela_traffic_kib",
    "pte_bytes",
    "pte_sha256",
    "planned_buffer_kib",
    "fit",
    "fit_sram_margin_kib",
    "fit_flash_margin_kib",
    "fit_dram_margin_kib",
    "board_npu_clock_mhz",
    "board_inference_ms",
    "deploy",
    # the NPU's question: does the NPU path compute what the quantized model computes? (identical,
    # within tolerance, ok, flagged, inconclusive), with why and where
    "numerics",
    "numerics_reason",
    "numerics_layer",
    # the quantization's question: what does quantization cost against float? (ok, flagged,
    # inconclusive, or not judged without representative data)
    "vs_float",
    "vs_float_reason",
    "vs_float_layer",
    "data",
    *NUMERIC_COLUMNS,
    "worst_layer",
    "firmware",
    "runner_method_pool_kib",
    "runner_scratch_pool_kib",
    "npu_runner",
    "npu_runner_code_kib",
    "fvp_run",
    "fvp_npu_cycles",
    "fvp_cpu_cycles",
    "fvp_bundleio",
    "cell",
    "log",
    "reproducer",
    # a failed cell: the output of the job that failed (`--forcerun` it to retry)
    "failed_output",
    # a cell that compiled: the outputs of its later jobs whose failure was recorded (verification,
    # the runner, the FVP run), '; '-separated (`ethosweep failed` lists them with failed_output)
    "recorded_failures",
    "header",
    "pte",
    "optimise",
    "arena_cache_size",
    "vela_config",
    "seed",
    *(c for c in VERSION_COLUMNS if c != "vela_version"),  # vela_version is a key column
]


def cell_key(cell: dict, board: dict | None = None) -> dict:
    return {
        "model": cell["model"],
        "quantization": cell["quant"],
        "target": cell["target"],
        "system_config": cell["system_config"],
        "memory_mode": cell["memory_mode"],
        "vela_version": cell.get("vela_version", ""),
        "board": board["name"] if board else "",
        "task": cell.get("task") or "",
        "cell": cell_id(cell),
    }


def milliseconds(value: float) -> float:
    """A time in ms to four decimals, or to three significant figures where four decimals would say
    0: a cell of one small operator takes a few NPU cycles (2 at 500 MHz: 4e-06 ms), and a
    summary or report saying "0 ms" would say it takes no time."""
    rounded = round(value, 4)
    return rounded if rounded or not value else float(f"{value:.3g}")


def board_columns(board: dict, cell: dict, lowered: dict, figures: dict) -> dict:
    """The fit of a cell on a board, its inference time at the board's NPU clock, its bundle."""
    verdict = fit(
        board_from_params(board), cell["memory_mode"], lowered["pte_bytes"], figures, lowered["planned_buffer_bytes"]
    )
    margins = verdict.margins_kib
    return {
        "board": board["name"],
        "fit": verdict.verdict,
        **{f"fit_{r}_margin_kib": margins.get(r, "") for r in ("sram", "flash", "dram")},
        "board_npu_clock_mhz": board["npu_clock_mhz"],
        # Vela's cycles at the board's NPU clock (Vela's own time assumes the system config's clock)
        "board_inference_ms": milliseconds(figures["cycles_total"] / (board["npu_clock_mhz"] * 1e3))
        if figures.get("cycles_total")
        else "",
        "deploy": f"results/deploy/{board['name']}/{cell_id(cell)}",
    }


def _parameters(cell: dict) -> dict:
    vela = cell.get("vela", {})
    return {
        "optimise": vela.get("optimise"),
        "arena_cache_size": vela.get("arena_cache_size") or "",
        "vela_config": vela.get("config") or "Arm/vela.ini",
        "seed": cell.get("seed"),
    }


def numerics_columns(
    lowered: dict, verify_report: str | None, cell: str = "", fallback_report: str | None = None
) -> dict:
    """The verify stage's figures for this cell, if what it verified is the cell's own program (the
    profile's lowering, or for a fallback cell its own lowering: results.table.verification_of; the
    cell compiled even where verification failed: its numerics say so); `verify_report` None:
    verification is off (numerics.verify)."""
    if verify_report is None:
        return {"numerics": NOT_VERIFIED, "numerics_reason": NOT_VERIFIED_REASON, "vs_float": NOT_VERIFIED}
    verified, why = verification_of(lowered, cell, verify_report, fallback_report)
    if verified is None:
        return {"numerics": "unverified", "numerics_reason": why, "vs_float": "unverified"}
    metrics = verified["metrics"]
    worst = verified.get("worst_layers") or []
    against_float = verified.get("quantization") or {}
    return {
        "numerics": verified["verdict"],
        "numerics_reason": verified["reason"],
        "numerics_layer": verified["layer"],
        "vs_float": against_float.get("verdict", ""),
        "vs_float_reason": against_float.get("reason", ""),
        "vs_float_layer": against_float.get("layer", ""),
        "data": verified["data"],
        **{k: metrics.get(k, "") if metrics.get(k) is not None else "" for k in NUMERIC_COLUMNS},
        "worst_layer": f"{worst[0]['layer']} (-{worst[0]['snr_drop_db']} dB)" if worst else "",
    }


def cell_rows(cell: dict, *paths: str | None) -> list[dict]:
    """The summary rows of a cell whose stages all completed: one per board it is on, else one.
    `paths`: cell_row's, in its order."""
    row = cell_row(cell, *paths)
    if not cell.get("boards"):
        return [row]
    compile_meta, _, vela_summary = paths[:3]
    lowered, figures = read_json(compile_meta), read_json(vela_summary)["cell"]
    return [{**row, **board_columns(board, cell, lowered, figures)} for board in cell["boards"]]


def cell_row(
    cell: dict,
    compile_meta: str,
    delegation: str,
    vela_summary: str,
    pte: str,
    header: str,
    verify_report: str | None,
    fallback_report: str | None = None,
) -> dict:
    """The summary row of a cell whose stages all completed (without board columns)."""
    lowered, vela = read_json(compile_meta), read_json(vela_summary)
    table, figures = cell_delegation(lowered, read_json(delegation)), vela["cell"]
    fallback = lowered.get("fallback")
    reason = (
        fallback_reason(fallback) if fallback else _delegation_reason(table) if table["delegated"] != "full" else ""
    )
    missing = (lowered.get("cpu_kernels") or {}).get("missing") or []
    mismatches = table.get("boundary_mismatches") or []
    row = {
        **cell_key(cell),
        # compiled, but the runner has no kernel for an operator it leaves on the CPU: it fails at
        # load; or the program takes an NPU output as float that the NPU writes as integers
        "status": "will not load" if missing else "will not run" if mismatches else "ok",
        "reason": "; ".join(filter(None, [will_not_load(missing), will_not_run(mismatches), reason])),
        "delegation": table["delegated"],
        "partitions": table["partitions"],
        "npu_ops": table["npu_ops"],
        "cpu_ops": table["cpu_compute_ops"],
        "cpu_operators": "; ".join(f"{op} x{n}" for op, n in table["cpu_operators"].items()),
        **cpu_part_columns(table, missing),
        "pte_bytes": lowered["pte_bytes"],
        "pte_sha256": lowered["pte_sha256"],
        "planned_buffer_kib": round(lowered["planned_buffer_bytes"] / 1024, 2),
        "pte": pte,
        "header": header,
        **_parameters(cell),
        **version_columns(lowered["versions"]),
        **numerics_columns(lowered, verify_report, cell_id(cell), fallback_report),
    }
    return {**row, **vela_columns(figures, table)} if figures else row


# the bytes moved through every memory (Vela), for the report's roofline
TRAFFIC = ("sram_total_bytes", "dram_total_bytes", "on_chip_flash_total_bytes", "off_chip_flash_total_bytes")


def vela_columns(figures: dict, table: dict) -> dict:
    """A compiled cell's columns from Vela's performance figures (compiler estimates)."""
    utilisation = figures["mac_utilisation"]
    return {
        "vela_macs": figures["nn_macs"],
        "vela_cycles_total": figures["cycles_total"],
        "vela_cycles_npu": figures["cycles_npu"],
        "vela_inference_ms": milliseconds(figures["inference_time_ms"]),
        "vela_time_covers": time_covers(table),
        **layout_columns(figures.get("layout") or {}),
        "vela_inferences_per_s": round(figures["inferences_per_second"], 1),
        "vela_mac_utilisation_pct": round(100 * utilisation, 2) if utilisation is not None else "",
        "vela_sram_kib": round(figures["sram_memory_used"], 2),
        "vela_off_chip_flash_kib": round(figures["off_chip_flash_memory_used"], 2),
        "vela_on_chip_flash_kib": round(figures["on_chip_flash_memory_used"], 2),
        "vela_dram_kib": round(figures["dram_memory_used"], 2),
        "vela_core_clock_mhz": round(figures["core_clock"] / 1e6, 1),
        "vela_traffic_kib": round(sum(figures.get(k) or 0 for k in TRAFFIC) / 1024, 2),
    }


def will_not_run(mismatches: list[str]) -> str:
    """'compiled, will not run: ...' for a program that takes an NPU output in another dtype than
    the NPU writes it (ethosweep.compile.delegation.boundary_mismatches), or ''."""
    if not mismatches:
        return ""
    return (
        f"compiled, will not run: {mismatches[0]}{f' and {len(mismatches) - 1} more' if mismatches[1:] else ''}: "
        "ExecuTorch left a float boundary in an integer-only partition, which the device's Ethos-U backend "
        "rejects (pytorch/executorch#19364, fixed upstream by #22966; until then: int8, or an Ethos-U85, "
        "where the operator the partitioner leaves on the CPU runs on the NPU)"
    )


def cpu_part_columns(table: dict, missing: list[str]) -> dict:
    """What the cell leaves to the CPU, beside the operators: MACs, tensor bytes, hand-overs, kernels."""
    return {
        "cpu_macs": table.get("cpu_macs", ""),
        "cpu_tensor_kib": round(table["cpu_tensor_bytes"] / 1024, 2) if "cpu_tensor_bytes" in table else "",
        "npu_cpu_switches": table.get("switches", ""),
        "cpu_kernels_missing": "; ".join(missing),
    }


def time_covers(table: dict) -> str:
    """What Vela's time of a cell covers: Vela estimates the NPU's partitions only."""
    if not table["cpu_compute_ops"]:
        return "the whole model"
    return f"the NPU part only: the CPU's {table['cpu_compute_ops']} operator(s) are not timed (CPU time not estimated)"


def layout_columns(layout: dict) -> dict:
    return {
        "vela_transposes": layout.get("transposes", ""),
        "vela_transpose_cycles_pct": _percent(layout.get("transposes_share")),
        "vela_rescales": layout.get("rescales", ""),
        "vela_rescale_cycles_pct": _percent(layout.get("rescales_share")),
    }


def _percent(share) -> float | str:
    return round(100 * share, 2) if isinstance(share, (int, float)) else ""


def fallback_reason(fallback: dict) -> str:
    """'fallback: Vela 5.1.0 cannot compile ...; kept on the CPU: stem, project (conv2d, ...)'"""
    kept = "; ".join(part["description"] for part in fallback.get("refused", []))
    return f"fallback: {fallback['reason']}; kept on the CPU and the rest compiled: {kept}"


def _delegation_reason(table: dict) -> str:
    if table["delegated"] == "none":
        return "nothing delegated: the whole model runs on the CPU"
    reasons = table.get("cpu_reasons", {})
    return "partly delegated; on the CPU: " + "; ".join(
        f"{op} ({reasons[op]})" if op in reasons else op for op in table["cpu_operators"]
    )


def failed_rows(cell: dict, record: dict) -> list[dict]:
    """The rows of a cell whose chain stopped (one per board it is on, else one): the failure
    record its last stage carries (ethosweep.runtime.outcome): the stage, why, its log, and the
    reproducer a failed Vela run left. Status 'does not fit' where Vela could not place the tensors
    in the SRAM its memory mode gives (the configuration is too small: no tool failed), else 'failed'."""
    row = {
        **cell_key(cell),
        "status": DOES_NOT_FIT if record.get("does_not_fit") else "failed",
        "reason": describe(record),
        "log": record.get("log", ""),
        "reproducer": record.get("reproducer", ""),
        "failed_output": record.get("output", ""),
        **_parameters(cell),
        **_versions_now(cell),
    }
    return [{**row, "board": b["name"]} for b in cell["boards"]] if cell.get("boards") else [row]


def _versions_now(cell: dict) -> dict:
    """The versions a cell that did not complete would have been made with."""
    return {**version_columns(tool_versions()), "vela_version": cell.get("vela_version", "")}


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in COLUMNS})
    return buffer.getvalue()


def write_summary(rows: list[dict], path: str | Path) -> None:
    atomic_write_text(path, to_csv(rows))


def firmware_columns(plan: dict, run: str | None) -> dict:
    """What the firmware and FVP stages say about a cell: one line each when they could not
    run (what is missing), the runner's pools, and the FVP's simulated numbers when they ran."""
    columns = {
        "firmware": plan["firmware"] if plan["firmware"] != "ready" else "built",
        "runner_method_pool_kib": round(plan["pools"]["method_allocator_bytes"] / 1024, 1),
        "runner_scratch_pool_kib": round(plan["pools"]["scratch_bytes"] / 1024, 1),
        "fvp_run": plan["run"],
    }
    failed = failure_of(run) if run is not None else None
    if failed is not None:
        columns["fvp_run"] = f"failed: {describe(failed)}"
    elif run is not None:
        run = read_json(run)
        columns.update(
            {
                "fvp_run": "ok",
                "fvp_npu_cycles": run["npu_cycles"] if run["npu_cycles"] is not None else "",
                "fvp_cpu_cycles": run["cpu_cycles_total"] if run["cpu_cycles_total"] is not None else "",
                "fvp_bundleio": run["bundleio"] or "",
            }
        )
    return columns


def npu_runner_columns(firmware: str | None, state: str) -> dict:
    """ethosweep's own runner with the Ethos-U delegate (Corstone-300 layout): linked, or why not."""
    if firmware is None:
        return {"npu_runner": state}
    failed = failure_of(firmware)
    if failed is not None:
        return {"npu_runner": f"failed: {describe(failed)}"}
    firmware = read_json(firmware)
    return {
        "npu_runner": f"linked for Corstone-300 ({firmware['elf_bytes']} B ELF, {firmware['fit']['line']}); "
        f"{firmware['run']}",
        "npu_runner_code_kib": round(firmware["text"] / 1024, 1),
    }


def recorded_outputs(*paths: str | None) -> list[str]:
    """The outputs of the failed jobs whose records are among `paths` (None: a stage that did not run)."""
    records = (failure_of(path) for path in paths if path)
    return list(dict.fromkeys(record["output"] for record in records if record and record.get("output")))


@dataclass(frozen=True)
class CellOutputs:
    """Every cell's stage outputs, lists in matrix order (summary.smk's inputs): empty where the run
    has none of a kind (`headers: bundles`, `numerics.verify: false`, no firmware)."""

    compile_meta: list[str]
    delegation: list[str]
    vela_summary: list[str]
    pte: list[str]
    header: list[str] = ()
    verify_report: list[str] = ()
    fallback_report: list[str] = ()
    firmware_plan: list[str] = ()


@dataclass(frozen=True)
class Runs:
    """The cells that ran on an FVP or linked an NPU runner: their records and their ids, and each
    cell's runner state (None where it has none)."""

    fvp_run: list[str] = ()
    fvp_cells: list[str] = ()
    npu_runner: list[str] = ()
    npu_runner_cells: list[str] = ()
    npu_runner_state: list = ()


def summarize(cells: list[dict], outputs: CellOutputs, summary: str, runs: Runs = Runs()) -> list[dict]:
    """Write results/summary.csv from every cell's stage outputs."""
    missing = [None] * len(cells)
    fvp_run = dict(zip(runs.fvp_cells, runs.fvp_run, strict=True))
    npu_runner = dict(zip(runs.npu_runner_cells, runs.npu_runner, strict=True))
    per_cell = (
        outputs.compile_meta,
        outputs.delegation,
        outputs.vela_summary,
        outputs.pte,
        outputs.header or [""] * len(cells),
        outputs.verify_report or missing,
        outputs.fallback_report or missing,
    )
    plans, states = outputs.firmware_plan or missing, runs.npu_runner_state or missing
    rows = []
    for cell, plan, state, *paths in zip(cells, plans, states, *per_cell, strict=True):
        # the cell's Vela job carries the failure of any stage before it, or its own
        record = failure_of(paths[0])
        if record is not None:
            rows += failed_rows(cell, record)
            continue
        extra, run, linked = {}, fvp_run.get(cell_id(cell)), npu_runner.get(cell_id(cell))
        if plan is not None:
            extra = firmware_columns(read_json(plan), run)
        if state is not None:
            extra.update(npu_runner_columns(linked, state))
        # a verification that is another profile's: that one's failure too
        extra["recorded_failures"] = "; ".join(recorded_outputs(paths[5], verified_path(paths[5]), run, linked))
        rows += [{**row, **extra} for row in cell_rows(cell, *paths)]
    write_summary(rows, summary)
    return rows
