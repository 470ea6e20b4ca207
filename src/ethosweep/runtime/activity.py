"""What a job is doing right now, for the message when its process dies.

A job's stage runs in a child process that its supervisor (ethosweep.runtime.jobs) watches. When
native code kills that process (a segmentation fault in a compiler, the kernel's
out-of-memory killer), the supervisor knows only the signal. Stages mark the stretches
that run a tool with `running(tool, detail)`; the supervisor reads the marks through a
pipe and names the tool in the failure: "the TOSA reference model crashed (SIGSEGV)
running partition 1 on sample 3".

Outside a supervised job (tests, scripts) the marks go nowhere. Torch-free.
"""

from __future__ import annotations

import contextlib
import json
import os

_channel: int | None = None  # the write end of the supervisor's pipe, in a supervised job


def report_to(fd: int | None) -> None:
    """Send this process's marks to `fd` (the supervisor sets it in the job's process)."""
    global _channel
    _channel = fd


def send(message: dict) -> None:
    if _channel is None:
        return
    try:
        os.write(_channel, (json.dumps(message) + "\n").encode())
    except OSError:  # the supervisor is gone; the job carries on as it would without it
        pass


@contextlib.contextmanager
def running(tool: str, detail: str = ""):
    """Mark `tool` (e.g. "Vela") as running, doing `detail` (e.g. "compiling partition 0 for ...")."""
    send({"activity": [tool, detail]})
    try:
        yield
    finally:
        send({"activity": None})
