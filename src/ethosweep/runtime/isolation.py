"""Running a native tool (Vela, the TOSA reference model) in a forked child process.

Vela's compiler and the TOSA reference model are native code: when they crash (a
segmentation fault, an abort), the process that called them dies with them, and all a
job could say is that it died. Calling them in a fork keeps the job alive to say what
crashed, with which signal, and on what input, and to keep what reproduces it.

A crash is the input's only if it happens again: the call is tried once more in a fresh fork,
and the error says whether it crashed again (`ToolCrashed.reproduced`, what
ethosweep.runtime.errors.kept weighs). A SIGKILL is the machine's (memory) and is not tried again.

A fork costs milliseconds (copy-on-write, the modules already imported stay imported),
and the child writes to the job's log like the job itself (it inherits the file
descriptors). Results come back pickled through a pipe; an exception comes back as its one-line
message and its cause (ethosweep.runtime.errors.fault_of, decided in the child where the
exception's chain is still whole).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import pickle
import signal
import sys
import traceback
from typing import Any, Callable

from ethosweep.runtime import activity
from ethosweep.runtime.errors import Fault, StageError, fault_of, innermost, reproduced, where_raised


class ToolCrashed(StageError):
    """The tool's process died: from a signal (`signal_name`), or exited without a result. SIGKILL is
    almost always the machine's memory; any other crash is a native crash, kept as the input's
    outcome only if it `reproduced` in a fresh process."""

    def __init__(self, message: str, signal_name: str, reproduced: bool = False, doing: tuple | None = None):
        super().__init__(message, Fault.MEMORY if signal_name == "SIGKILL" else Fault.CRASH)
        self.signal_name = signal_name
        self.reproduced = reproduced
        self.doing = doing  # (tool, detail) the child last marked as running (ethosweep.runtime.activity)


class ToolFailed(StageError):
    """The tool raised an error: its one-line message, and its cause as the child classed it."""


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def call_in_child(function: Callable[..., Any], *args: Any, what: str, retry_crash: bool = True) -> Any:
    """`function(*args)` in a forked child; its return value, or:
    ToolFailed(`what`: its one-line error) if it raised (with the error's cause),
    ToolCrashed(`what` crashed (SIGNAME)) if it died. A crash (the child's, or one the child reports
    of a process it ran) is tried once more in a fresh fork (`retry_crash`); crashing again makes
    it `reproduced`."""
    outcome = _fork_and_call(function, args)
    if retry_crash and _crashed(outcome):
        print(f"ethosweep: {what} crashed; trying once more in a fresh process", flush=True)
        again = _fork_and_call(function, args)
        if _crashed(again):
            return _result(again, what, reproduced=True)
        print(f"ethosweep: {what} did not crash the second time", flush=True)
        outcome = again
    return _result(outcome, what)


def _crashed(outcome: tuple[str, Any]) -> bool:
    """A crash worth trying again: the child died (not SIGKILL: memory), or it reports a crash."""
    kind, value = outcome
    if kind == "crashed":
        return value[0] != "SIGKILL"
    return kind == "error" and value[1] == Fault.CRASH.name and not value[2]


def _result(outcome: tuple[str, Any], what: str, reproduced: bool = False) -> Any:
    kind, value = outcome
    if kind == "crashed":
        died_of, doing = value
        detail = f" {doing[1]}" if doing and doing[1] else ""
        if died_of == "SIGKILL":  # the kernel's out-of-memory killer, or a cluster's memory limit
            raise ToolCrashed(f"{what} was killed (SIGKILL){detail}, most likely for memory", died_of, doing=doing)
        raise ToolCrashed(f"{what} crashed ({died_of}){detail}", died_of, reproduced=reproduced, doing=doing)
    if kind == "error":
        message, fault_name, crash_reproduced = value
        failure = ToolFailed(f"{what}: {message}", Fault[fault_name])
        failure.reproduced = crash_reproduced or reproduced
        raise failure
    return value


def _fork_and_call(function: Callable[..., Any], args: tuple) -> tuple[str, Any]:
    """("ok", return value) | ("error", (message, fault name, reproduced)) | ("crashed", (signal name
    or 'exit N ...', the (tool, detail) it last marked as running or None))."""
    flush_standard_streams()
    read_end, write_end = os.pipe()
    board = activity.new_board()
    pid = os.fork()
    if pid == 0:  # the child: run, send the outcome, and leave without cleanup handlers
        os.close(read_end)
        gc.freeze()  # the GC leaves the inherited objects alone (see ethosweep.runtime.worker)
        activity.post_to(board)
        crash_traces_to_log()
        _one_thread()
        status = 0
        try:
            outcome = ("ok", function(*args))
        except BaseException as error:  # noqa: BLE001 - everything goes back to the parent
            traceback.print_exc()
            message = " ".join(str(error).split()) or type(error).__name__
            fault = fault_of(error)
            if fault is Fault.BUG:  # where in ethosweep: the parent sees only this message
                root = innermost(error)
                message = f"{type(root).__name__}: {' '.join(str(root).split())} (at {where_raised(root)})"
            outcome = ("error", (message, fault.name, reproduced(error)))
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
    doing = activity.last_posted(board)
    board.close()
    if os.WIFSIGNALED(status):
        return "crashed", (signal_name(os.WTERMSIG(status)), doing)
    if not data:
        return "crashed", (f"exit {os.waitstatus_to_exitcode(status)} without a result", doing)
    return pickle.loads(data)


def _one_thread() -> None:
    """In a fork: torch on one thread. OpenMP (libgomp) is not fork-safe: a child whose parent ran a
    parallel region waits forever for the parent's pool threads, which the fork did not copy (seen:
    the verify stage's NPU path in a fork of a caller running torch on two threads)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def crash_traces_to_log() -> None:
    """In a child that may crash in native code: the crash's Python stack goes to its fd 2, the job's
    log (ethosweep.runtime.execute points fds 1 and 2 there), not where a fault handler inherited
    from the parent writes (pytest's: the terminal, 31 crash dumps in one run of the tests)."""
    faulthandler.enable(file=2)


def flush_standard_streams() -> None:
    """Flush Python's stdout and stderr before a fork, or the child prints the parent's buffered
    output again (and before a child exits, or its last lines are lost)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
