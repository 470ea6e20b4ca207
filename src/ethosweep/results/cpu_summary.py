"""The CPU-only cells' table: results/cpu/summary.csv, and its lines in the terminal.

A row per (model, scheme, CPU): the .pte and how much of it runs on CMSIS-NN kernels, the runner
ELF (or what is missing to build it), and the QEMU run (functional only: QEMU's timing means
nothing). Torch-free: the Snakefile prints it after a run.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ethosweep.runtime.io import read_json
from ethosweep.runtime.outcome import describe, failure_of, first_failure
from ethosweep.runtime.provenance import VERSION_COLUMNS, version_columns

COLUMNS = (
    "model",
    "quant",
    "cpu",
    "status",
    "reason",
    "pte_bytes",
    "planned_kib",
    "cmsis_nn_ops",
    "portable_ops",
    "operators",
    "firmware",
    "elf_code_kib",
    "elf_data_bss_kib",
    "method_pool_kib",
    "firmware_fit",
    "qemu_run",
    "qemu_max_diff_steps",
    "qemu_top1",
    "method_allocator_used_kib",
    "run_input",
    "calibrated_on",
    # the outputs of the jobs whose recorded failure this row carries (`ethosweep failed` lists them)
    "recorded_failures",
    *VERSION_COLUMNS,
)


def cpu_row(
    cell: dict, lower_meta: str, firmware: str | None, qemu: str | None, firmware_state: str, qemu_state: str
) -> dict:
    """One CPU-only cell. `firmware`/`qemu`: the job outputs, or None where the stage cannot run
    here, with `*_state` saying why ("not configured: ..."). A failed stage's record
    (ethosweep.runtime.outcome) in place of an output makes the cell failed, naming it."""
    failed = failure_of(lower_meta)
    if failed is not None:
        return {
            **{c: "" for c in COLUMNS},
            **cell,
            "status": "failed",
            "reason": describe(failed),
            "recorded_failures": failed.get("output", ""),
        }
    lower = read_json(lower_meta)
    versions = lower.get("versions", {})
    row = {
        **cell,
        "status": "ok",
        "pte_bytes": lower["pte_bytes"],
        "planned_kib": round(lower["planned_bytes"] / 1024, 1),
        "cmsis_nn_ops": lower["cmsis_nn_ops"],
        "portable_ops": lower["portable_ops"],
        "operators": " ".join(f"{op}x{n}" for op, n in lower["operators"].items()),
        "run_input": lower["run_input"],
        "calibrated_on": lower["calibrated_on"],
        **version_columns(versions),
    }
    row.update(_stage_columns(firmware, "firmware", firmware_state, _firmware_columns))
    row.update(_stage_columns(qemu, "qemu_run", qemu_state if firmware else "not run: no runner ELF", _qemu_columns))
    later = first_failure(p for p in (firmware, qemu) if p)
    if later is not None:
        row.update(status="failed", reason=describe(later))
    records = (failure_of(p) for p in (firmware, qemu) if p)
    row["recorded_failures"] = "; ".join(dict.fromkeys(r["output"] for r in records if r and r.get("output")))
    return {column: row.get(column, "") for column in COLUMNS}


def _stage_columns(output: str | None, column: str, state: str, columns_of) -> dict:
    """A later stage's columns: why it did not run (`state`), how it failed, or what its record says."""
    if output is None:
        return {column: state}
    if (failed := failure_of(output)) is not None:
        return {column: f"failed: {describe(failed)}"}
    return columns_of(read_json(output))


def _firmware_columns(record: dict) -> dict:
    return {
        "firmware": f"built for {record['board']}: {record['elf_bytes']} B ELF",
        "elf_code_kib": round(record["text"] / 1024, 1),
        "elf_data_bss_kib": round((record["data"] + record["bss"]) / 1024, 1),
        "method_pool_kib": round(record["method_pool_bytes"] / 1024, 1),
        "firmware_fit": record["fit"]["line"],
    }


def _qemu_columns(record: dict) -> dict:
    comparison = record["comparison"]
    return {
        "qemu_run": comparison["line"],
        "qemu_max_diff_steps": comparison["max_diff_steps"],
        "qemu_top1": "same" if comparison.get("same_top1") else "differs",
        "method_allocator_used_kib": round(record["method_allocator"]["used"] / 1024, 1),
    }


def write_cpu_summary(rows: list[dict], path: str) -> None:
    import io

    from ethosweep.runtime.io import atomic_write_text

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


def format_cpu_lines(path: str) -> str:
    """A few lines for the terminal: one per cell, then the firmware/QEMU state if it is the same everywhere."""
    if not Path(path).exists():
        return ""
    from ethosweep.results.table import read_summary_csv

    rows = read_summary_csv(path)
    if not rows:
        return ""
    lines = [f"CPU-only cells ({len(rows)}; Cortex-M backend, no NPU; QEMU runs are functional checks, not timings):"]
    for row in rows:
        if row.get("status", "ok") != "ok" and not row["pte_bytes"]:
            lines.append(f"  {row['model']}/{row['quant']}/{row['cpu']}: {row['status']}: {row['reason']}")
            continue
        ops = f"{row['cmsis_nn_ops']} CMSIS-NN + {row['portable_ops']} portable ops"
        run = row["qemu_run"] if row["firmware"].startswith("built") else ""
        lines.append(
            f"  {row['model']}/{row['quant']}/{row['cpu']}: .pte {int(row['pte_bytes']):,} B, {ops}"
            + (f"; ELF code {row['elf_code_kib']} KiB; QEMU {run}" if run else "")
        )
    states = {row["firmware"] for row in rows if row["firmware"] and not row["firmware"].startswith("built")}
    for firmware in sorted(states):
        lines.append(f"  firmware: {firmware} (docs/firmware.md)")
    return "\n".join(lines)


def summarize(
    cells: list[dict],
    meta: list[str],
    firmware: list[str],
    qemu: list[str],
    firmware_state: str,
    qemu_state: str,
    summary: str,
) -> list[dict]:
    """The summary job: `firmware`/`qemu` are empty where those stages cannot run on this machine."""
    rows = [
        cpu_row(cell, meta[i], firmware[i] if firmware else None, qemu[i] if qemu else None, firmware_state, qemu_state)
        for i, cell in enumerate(cells)
    ]
    write_cpu_summary(rows, summary)
    print(format_cpu_lines(summary))
    return rows
