"""Failures of stages: the exception stages raise for expected failures, and the
line a failed job leaves in its log. Kept apart from the job runner, so that
editing how jobs run does not change every stage's code version."""

from __future__ import annotations

import os
from pathlib import Path

# A line with this prefix in a job's log is the job's failure reason; the
# summary reads it to explain a failed cell in one line.
FAILURE_PREFIX = "ethosweep-failure: "


class StageError(Exception):
    """An expected failure of a stage: bad model, Vela error, ... (no traceback needed)."""


def failure_reason(log_path: str | os.PathLike) -> str | None:
    """The failure line a job wrote to its log, if any."""
    try:
        lines = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if line.startswith(FAILURE_PREFIX):
            return line[len(FAILURE_PREFIX) :]
    return None
