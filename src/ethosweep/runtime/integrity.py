"""Checking that an artifact a later stage reads is the one its stage wrote.

Stage outputs are written atomically, but a file can still be damaged after
the fact (a full disk, a copy gone wrong, a hand edit). Snakemake only sees
modification times; the stage that writes an artifact records its size and sha256,
and the stages that read them check before trusting them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ethosweep.runtime.errors import Fault, StageError


class DamagedArtifact(StageError):
    """An input is not what its stage wrote: the workspace is damaged, not the cell; the job
    fails (nothing is recorded) until the file is rebuilt."""

    fault = Fault.DAMAGED


def verify(path: str | Path, expected_bytes: int, expected_sha256: str, written_by: str) -> bytes:
    """The file's bytes, if they are what `written_by` recorded; StageError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DamagedArtifact(
            f"{path} is missing although {written_by} recorded it; delete {written_by}'s outputs and rerun"
        )
    data = path.read_bytes()
    if len(data) != expected_bytes or hashlib.sha256(data).hexdigest() != expected_sha256:
        what = "truncated" if len(data) < expected_bytes else "corrupt"
        raise DamagedArtifact(
            f"{path} is {what}: {len(data)} bytes, but {written_by} wrote {expected_bytes} bytes "
            f"(sha256 {expected_sha256[:12]}...); delete it and rerun to rebuild it"
        )
    return data
