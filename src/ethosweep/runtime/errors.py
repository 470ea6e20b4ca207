"""Failures of stages: the exception stages raise for expected failures, and the
line a failed job leaves in its log. Kept apart from the job runner, so that
editing how jobs run does not change every stage's code version."""

from __future__ import annotations

import errno

# A line with this prefix ends the log of a job that failed: its reason, as the terminal and the
# failure record (ethosweep.runtime.outcome) say it.
FAILURE_PREFIX = "ethosweep-failure: "


class StageError(Exception):
    """An expected failure of a stage: bad model, Vela error, ... (no traceback needed).

    `recorded`: whether the failure is an outcome of the job's inputs, kept until they change
    (ethosweep.runtime.outcome), or may not happen again, so that the job fails and is retried."""

    recorded = True


class TransientError(StageError):
    """A failure that may not recur: the job fails and the next run retries it."""

    recorded = False


# errno values of an exhausted or failing machine, not of the job's inputs
_TRANSIENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EAGAIN}


def is_recorded(error: BaseException) -> bool:
    """Whether a stage's exception is an outcome of its inputs (recorded) or of the machine
    (memory, disk, I/O: the job fails and is retried). Everything a stage raises from its inputs,
    its model's code or a tool it runs on them counts as the former."""
    if isinstance(error, StageError):
        return error.recorded
    if isinstance(error, MemoryError):
        return False
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return False
    return True
