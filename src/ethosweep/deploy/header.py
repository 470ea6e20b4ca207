"""Stage 5, header: each cell's .pte as a C header (ethosweep.deploy.c_array) for firmware that
embeds the model. The header *defines* the array: include it in exactly one C file."""

from __future__ import annotations

from ethosweep.deploy.c_array import render_header
from ethosweep.runtime.integrity import verify
from ethosweep.runtime.io import atomic_write_text, read_json


def write_header(pte: str, meta: str, symbol: str, header: str | None = None) -> dict:
    """Write the C header for one cell's .pte (checked against what the vela stage recorded); none
    where the job has no header output (`headers: bundles`: the bundles render their own)."""
    if header is None:
        return {}
    lowered = read_json(meta)
    data = verify(pte, lowered["pte_bytes"], lowered["pte_sha256"], "the vela stage")
    atomic_write_text(header, render_header(data, symbol, origin=str(pte)))
    return {"symbol": symbol, "bytes": len(data)}
