"""Running a native tool (Vela, the TOSA reference model) in a forked child process.

Vela's compiler and the TOSA reference model are native code: when they crash (a
segmentation fault, an abort), the process that called them dies with them, and all a
job could say is that it died. Calling them in a fork keeps the job alive to say what
crashed, with which signal, and on what input, and to keep what reproduces it.

A fork costs milliseconds (copy-on-write, the modules already imported stay imported),
and the child writes to the job's log like the job itself (it inherits the file
descriptors). Results come back pickled through a pipe.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import traceback
from typing import Any, Callable

from ethosweep.runtime.errors import StageError


class ToolCrashed(StageError):
    """The tool's process died from a signal. A crash on the job's input is recorded like any
    failure of the tool; SIGKILL is almost always the machine's memory, which may not recur."""

    def __init__(self, message: str, signal_name: str):
        super().__init__(message)
        self.signal_name = signal_name
        self.recorded = signal_name != "SIGKILL"


class ToolFailed(StageError):
    """The tool raised an error (reported by the child as its one-line message)."""


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def call_in_child(function: Callable[..., Any], *args: Any, what: str) -> Any:
    """`function(*args)` in a forked child; its return value, or:
    ToolFailed(`what` + its one-line error) if it raised,
    ToolCrashed(`what` crashed (SIGNAME)) if it died from a signal."""
    flush_standard_streams()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the outcome, and leave without cleanup handlers
        os.close(read_end)
        gc.freeze()  # the GC leaves the inherited objects alone (see ethosweep.runtime.worker)
        status = 0
        try:
            outcome = ("ok", function(*args))
        except BaseException as error:  # noqa: BLE001 - everything goes back to the parent
            traceback.print_exc()
            outcome = ("error", " ".join(str(error).split()) or type(error).__name__)
            status = 1
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            flush_standard_streams()
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal_name(os.WTERMSIG(status))
        raise ToolCrashed(f"{what} crashed ({name})", name)
    if not data:
        raise ToolCrashed(
            f"{what} exited with status {os.waitstatus_to_exitcode(status)} without a result",
            f"exit {os.waitstatus_to_exitcode(status)}",
        )
    kind, value = pickle.loads(data)
    if kind == "error":
        raise ToolFailed(f"{what}: {value}")
    return value


def flush_standard_streams() -> None:
    """Flush Python's stdout and stderr before a fork, or the child prints the parent's buffered
    output again (and before a child exits, or its last lines are lost)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
