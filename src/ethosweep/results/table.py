"""The summary table as every reader of it sees it: reading it, a row's cell, a number in it.

The summary (results/summary.csv) is written by ethosweep.results.summary and read by the
report, the CPU summary and `ethosweep compare`; what they share about its rows lives here.
"""

from __future__ import annotations

import csv
import math
import os
import re
from functools import lru_cache
from pathlib import Path

from ethosweep.matrix.cell import Cell, cell_id
from ethosweep.runtime.io import read_json
from ethosweep.runtime.outcome import describe, failure_of
from ethosweep.verify.job import SAME_AS_REPORT

CELL_FIELDS = ("model", "quantization", "target", "system_config", "memory_mode")
# A cell is also keyed by the Vela version that compiled it (several when `vela.versions` sweeps them).
KEY_COLUMNS = [*CELL_FIELDS, "vela_version", "board"]


# the statuses of a cell that compiled (Vela's figures stand), ok or not: the device may not load
# or run its program (ethosweep.results.summary)
COMPILED = ("ok", "will not load", "will not run")
# the status of a cell Vela could not compile because its tensors outgrow the SRAM its memory mode
# gives: no tool failed, the configuration is too small (also the word of a placement that does not fit)
DOES_NOT_FIT = "does not fit"

# a cell without a verify stage (numerics.verify off): what its row and its report page say
NOT_VERIFIED, NOT_VERIFIED_REASON = "not verified", "numerics.verify is off: an exploratory sweep"


def not_the_verified_program(lowered: dict, verified: dict) -> str | None:
    """Why a verification (the profile's, or a fallback lowering's) does not hold for a cell (its
    compile record `lowered`), or None when it does: the TOSA it verified is the cell's own."""
    if [p["tosa_sha256"] for p in lowered["partitions"]] != [p["tosa_sha256"] for p in verified["tosa_partitions"]]:
        return "the cell's TOSA differs from the verified TOSA"
    return None


def verification_of(
    lowered: dict, cell: str, verify_report: str, fallback_report: str | None
) -> tuple[dict | None, str]:
    """The verification that holds for a cell, or None and why not: the profile's (verify.json), or
    for a cell that fell back (compiled from a lowering with what Vela refused on the CPU) the
    verification of that lowering (fallbacks.json, verify_fallbacks). A failure record in their
    place says why."""
    if lowered.get("fallback"):
        failed = failure_of(fallback_report) if fallback_report else None
        if failed is not None:
            return None, f"verifying its fallback lowering failed: {describe(failed)}"
        found = (
            [v for v in read_json(fallback_report)["verifications"] if cell in v["cells"]] if fallback_report else []
        )
        if not found:
            return None, (
                "the cell compiled from a lowering with what Vela refused kept on the CPU, which no verification covers"
            )
        return (None, why) if (why := not_the_verified_program(lowered, found[0])) else (found[0], "")
    failed = failure_of(verify_report)
    if failed is not None:
        return None, describe(failed)
    held = verified_path(verify_report)
    if held != verify_report:  # the other profile's verification (ethosweep.verify.numerics)
        same_as = read_json(verify_report)["same_as"]
        if (failed := failure_of(held)) is not None:
            return None, f"{describe(failed)} ({same_as})"
        verified = {**read_json(held), "same_as": same_as}
    else:
        verified = read_json(verify_report)
    why = not_the_verified_program(lowered, verified)
    return (None, why) if why else (verified, "")


def verified_path(verify_report: str | None) -> str | None:
    """The record that holds a profile's verification: its own, or the other profile's that it
    names (SAME_AS_REPORT). Read once per record and version: every cell of a profile asks."""
    if not verify_report:
        return verify_report
    stat = os.stat(verify_report)
    return _held(verify_report, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4096)
def _held(path: str, _mtime_ns: int, _size: int) -> str:
    if failure_of(path) is not None:
        return path
    return read_json(path).get(SAME_AS_REPORT, path)


def cell_delegation(lowered: dict, delegation: dict) -> dict:
    """The delegation table the cell compiled from: its fallback lowering's (what Vela refused kept
    on the CPU) if it fell back, else its profile's."""
    return (lowered.get("fallback") or {}).get("delegation") or delegation


def read_summary_csv(path: str | Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(value, default=math.nan):
    """A CSV field as a float; `default` for a blank or non-numeric field."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def primary_rows(rows: list[dict]) -> list[dict]:
    """The rows of the Vela installed with ExecuTorch: what the picks and plots show when a sweep
    also compiles with other Vela versions (their cells' ids end in '@vela-<version>'). A sweep of
    other versions only keeps all its rows."""
    installed = [r for r in rows if Cell.of(r).vela_version is None]
    return installed or rows


def unique_cells(rows: list[dict]) -> list[dict]:
    """One row per compiled cell (a cell on several boards has a row per board)."""
    seen, cells = set(), []
    for row in rows:
        key = cell_id(row)
        if key not in seen:
            seen.add(key)
            cells.append(row)
    return cells


def firmware_footer(rows: list[dict]) -> list[str]:
    """The firmware/FVP state in a line each (the same reasons repeat for every cell; the CSV's
    firmware and fvp_run columns have them in full)."""
    lines = []
    missing_firmware = {
        part.split(":")[0]
        for r in rows
        if r.get("firmware", "").startswith("not configured: ")
        for part in r["firmware"].removeprefix("not configured: ").split("; ")
    }
    if missing_firmware:
        lines.append(f"firmware: not configured, missing {', '.join(sorted(missing_firmware))} (docs/firmware.md)")
    missing_fvp = sorted(
        {m.group(1) for r in rows for m in [re.search(r"(FVP_\S+) not found", r.get("fvp_run", ""))] if m}
    )
    if missing_fvp:
        lines.append(f"FVP runs: none, {', '.join(missing_fvp)} not found (Arm downloads)")
    linked = [r for r in rows if r.get("npu_runner", "").startswith("linked")]
    if linked:
        lines.append(
            f"NPU runners: {len(linked)} cell row(s) linked with ethosweep's runner (Corstone-300 layout); "
            "not run: QEMU models no NPU, the FVP is an Arm download"
        )
    ran = [r for r in rows if r.get("fvp_run") == "ok"]
    if ran:
        lines.append(f"{len(ran)} cell(s) ran on an FVP: fvp_ cycles are simulated (NPU cycle-accurate, CPU not).")
    return lines
