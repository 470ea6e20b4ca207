"""The CPU-only cells' table: results/cpu/summary.csv, and its lines in the terminal.

A row per (model, scheme, CPU): the .pte and how much of it runs on CMSIS-NN kernels, the runner
ELF (or what is missing to build it), and the QEMU run (functional only: QEMU's timing means
nothing). Torch-free: the Snakefile prints it after a run.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ethosweep.runtime.io import read_json
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
    *VERSION_COLUMNS,
)


def cpu_row(
    cell: dict, lower_meta: str, firmware: str | None, qemu: str | None, firmware_state: str, qemu_state: str
) -> dict:
    """One CPU-only cell. `firmware`/`qemu`: the job outputs, or None where the stage cannot run
    here, with `*_state` saying why ("not configured: ...")."""
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
    row.update(_firmware_columns(firmware, firmware_state))
    row.update(_qemu_columns(qemu, qemu_state if firmware else "not run: no runner ELF"))
    return {column: row.get(column, "") for column in COLUMNS}


def _firmware_columns(firmware: str | None, state: str) -> dict:
    if firmware is None:
        return {"firmware": state}
    record = read_json(firmware)
    return {
        "firmware": f"built for {record['board']}: {record['elf_bytes']} B ELF",
        "elf_code_kib": round(record["text"] / 1024, 1),
        "elf_data_bss_kib": round((record["data"] + record["bss"]) / 1024, 1),
        "method_pool_kib": round(record["method_pool_bytes"] / 1024, 1),
        "firmware_fit": record["fit"]["line"],
    }


def _qemu_columns(qemu: str | None, state: str) -> dict:
    if qemu is None:
        return {"qemu_run": state}
    record = read_json(qemu)
    comparison = record["comparison"]
    return {
        "qemu_run": comparison["line"],
        "qemu_max_diff_steps": comparison["max_diff_steps"],
        "qemu_top1": "same" if comparison.get("same_top1") else "differs",
        "method_allocator_used_kib": round(record["method_allocator"]["used"] / 1024, 1),
    }


def cell_paths(cell: dict) -> dict[str, Path]:
    """Where a CPU-only cell's stage outputs and logs are (workflow/rules/cpu.smk)."""
    key = f"{cell['model']}/{cell['quant']}/{cell['cpu']}"
    return {
        "lower": Path(f"results/cpu/{key}/lower.json"),
        "firmware": Path(f"results/cpu/{key}/firmware.json"),
        "qemu": Path(f"results/cpu/{key}/qemu.json"),
        "export_log": Path(f"logs/export/{cell['model']}.log"),
        "lower_log": Path(f"logs/cpu/{key}/lower.log"),
        "firmware_log": Path(f"logs/cpu/{key}/firmware.log"),
        "qemu_log": Path(f"logs/cpu/{key}/qemu.log"),
    }


def row_after_failure(
    cell: dict, firmware_expected: bool, qemu_expected: bool, firmware_state: str, qemu_state: str
) -> dict:
    """A CPU-only cell's row after a run with failures: what completed, and the first failure's reason."""
    from ethosweep.runtime.errors import failure_reason

    paths = cell_paths(cell)
    if not paths["lower"].exists():
        reasons = [
            f"{stage}: {reason}"
            for stage in ("export", "lower")
            if (reason := failure_reason(paths[f"{stage}_log"])) is not None
        ]
        status, reason = (
            ("failed", reasons[0]) if reasons else ("not run", "an earlier stage failed or the run was interrupted")
        )
        return {**{c: "" for c in COLUMNS}, **cell, "status": status, "reason": reason}
    failures = {stage: failure_reason(paths[f"{stage}_log"]) for stage in ("firmware", "qemu")}
    if firmware_expected and not paths["firmware"].exists():
        firmware_state = f"failed: {failures['firmware']}" if failures["firmware"] else "not run (interrupted)"
    if qemu_expected and not paths["qemu"].exists():
        qemu_state = f"failed: {failures['qemu']}" if failures["qemu"] else "not run (interrupted)"
    row = cpu_row(
        cell,
        str(paths["lower"]),
        str(paths["firmware"]) if paths["firmware"].exists() else None,
        str(paths["qemu"]) if paths["qemu"].exists() else None,
        firmware_state,
        qemu_state,
    )
    failed = [f"{stage}: {reason}" for stage, reason in failures.items() if reason]
    if failed:
        row.update(status="failed", reason=failed[0])
    return row


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
        lines.append(f"  firmware: {firmware} (README 'CPU-only cells, run in QEMU')")
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
