"""Failures of stages, classed by their cause, in one place.

Stages raise what happened: the model's error, an operator refused, a tool's failure on the
input, a crash, a full disk, a time limit. They do not decide what becomes of it. The job runner
(ethosweep.runtime.execute) asks `fault_of` for the cause and `kept` whether the failure is the
cell's own, recorded in place of its outputs and kept until what it depends on changes
(ethosweep.runtime.outcome), or the machine's, so that the job fails and the next run retries it.

| cause                                    | kept?                                                |
| ---------------------------------------- | ---------------------------------------------------- |
| the model or its code                    | yes                                                  |
| an operator a compiler refuses           | yes                                                  |
| a tool failing on this input             | yes                                                  |
| a bug in ethosweep                       | yes, until ethosweep's code changes                  |
| a version the registry does not have     | yes (for that version's cells)                       |
| a native crash                           | only once it happened again in a fresh process       |
| memory, disk, a time limit, interrupted  | no: the job fails and the next run retries it, until |
|                                          | it failed alike three runs in a row (then recorded)  |
| the registry or network unreachable      | no                                                   |
| a tool missing on this machine           | no (install it and rerun)                            |
| an input file damaged on disk            | no (delete it and rerun)                             |

docs/failures.md shows the same table and tests/test_fault_matrix.py walks it, stage by stage.
Kept apart from the job runner, so that editing how jobs run does not change every stage's code
version. Torch-free.
"""

from __future__ import annotations

import enum
import errno
import re
import socket
import subprocess
from pathlib import Path

# A line with this prefix ends the log of a job that failed: its reason, as the terminal and the
# failure record (ethosweep.runtime.outcome) say it.
FAILURE_PREFIX = "ethosweep-failure: "


class Fault(enum.Enum):
    """What caused a failure. The value is how a message or a record names it."""

    MODEL = "the model or its code"
    REFUSED = "an operator refused"
    TOOL = "a tool failed on this input"
    BUG = "a bug in ethosweep"
    MISSING_VERSION = "a version the registry does not have"
    CRASH = "a native crash"
    MEMORY = "memory"
    DISK = "disk"
    TIME = "a time limit"
    INTERRUPT = "an interruption"
    NETWORK = "the registry or network unreachable"
    MISSING_TOOL = "a tool missing on this machine"
    DAMAGED = "an input file damaged on disk"


# The failures that are the cell's own: the same inputs, code and tools fail the same way again.
KEPT = frozenset({Fault.MODEL, Fault.REFUSED, Fault.TOOL, Fault.BUG, Fault.MISSING_VERSION})


def kept(fault: Fault, reproduced: bool = False) -> bool:
    """Whether a failure of this cause is recorded and kept (the table in the module docstring).
    A crash is kept only when it `reproduced`: it happened again in a fresh process."""
    return fault in KEPT or (fault is Fault.CRASH and reproduced)


class StageError(Exception):
    """A failure a stage raises on purpose, with one line that says what happened (no traceback
    needed) and its cause (`fault`, default: a tool failed on this input)."""

    fault = Fault.TOOL

    def __init__(self, message: str = "", fault: Fault | None = None):
        super().__init__(message)
        if fault is not None:
            self.fault = fault


class Stopped(BaseException):
    """The job's process was told to stop (SIGTERM: its wall-clock limit, Snakemake stopping it).
    Not an Exception, and not SystemExit: no stage's `except` takes it for a failure of its own."""


# errno values of an exhausted or failing machine, not of the job's inputs
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})
MEMORY_ERRNOS = frozenset({errno.ENOMEM, errno.EAGAIN})
NETWORK_ERRNOS = frozenset(
    {
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
    }
)
# Exceptions whose cause is the machine wherever they are raised, by their type. A model's code that
# downloads weights during an outage raises URLError, ConnectionError (requests' too) or gaierror.
_MACHINE_TYPES: tuple[tuple[type[BaseException], Fault], ...] = (
    (MemoryError, Fault.MEMORY),
    (KeyboardInterrupt, Fault.INTERRUPT),
    (Stopped, Fault.INTERRUPT),
    (subprocess.TimeoutExpired, Fault.TIME),
    (TimeoutError, Fault.TIME),
    (ConnectionError, Fault.NETWORK),
    (socket.gaierror, Fault.NETWORK),
)
# torch's allocator reports a failed allocation as a RuntimeError ("[enforce fail at alloc_cpu.cpp:...]
# DefaultCPUAllocator: can't allocate memory" or "not enough memory"), not a MemoryError
_ALLOCATOR = re.compile(r"DefaultCPUAllocator: (can't allocate memory|not enough memory)|alloc_cpu\.cpp", re.I)
# ethosweep's own sources: an exception nothing expected, raised there, is ethosweep's bug
PACKAGE = Path(__file__).resolve().parents[1]


def fault_of(error: BaseException) -> Fault:
    """The cause of a stage's exception. A machine fault anywhere in its chain decides (a stage that
    wrapped a MemoryError in its own ModelError still ran out of memory); then an exception nothing
    expected (not a StageError) raised in ethosweep's own code, at the root of the chain: a bug in
    ethosweep, whoever's input it ran on; otherwise the outermost StageError's `fault`; otherwise (an
    exception nothing expected, raised in a tool) a failure on this input."""
    chain = list(_chain(error))
    for link in chain:
        machine = machine_fault(link)
        if machine is not None:
            return machine
    if raised_in_ethosweep(innermost(error)):
        return Fault.BUG
    return next((link.fault for link in chain if isinstance(link, StageError)), Fault.TOOL)


def innermost(error: BaseException) -> BaseException:
    """The innermost exception of a chain: what it was raised from, or while handling."""
    return list(_chain(error))[-1]


def raised_in_ethosweep(error: BaseException) -> bool:
    """Whether an unexpected exception (not a StageError, which ethosweep raises on purpose) was raised
    in ethosweep's own code: the innermost frame of its traceback is one of the package's files."""
    if isinstance(error, (StageError, SystemExit, KeyboardInterrupt, Stopped)) or error.__traceback__ is None:
        return False
    return Path(_raised_at(error).tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE)


def where_raised(error: BaseException) -> str:
    """'ethosweep/verify/numerics.py:123 in verify_numerics': where an exception was raised."""
    if error.__traceback__ is None:
        return ""
    frame = _raised_at(error)
    path = Path(frame.tb_frame.f_code.co_filename).resolve()
    shown = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path
    return f"{shown}:{frame.tb_lineno} in {frame.tb_frame.f_code.co_name}"


def _raised_at(error: BaseException):  # -> types.TracebackType
    """The last entry of an exception's traceback (not None): where it was raised."""
    frame = error.__traceback__
    while frame.tb_next is not None:
        frame = frame.tb_next
    return frame


def of_the_machine(error: BaseException) -> bool:
    """Whether a stage's exception is the machine's (memory, disk, time, interrupt, network, a damaged
    file, a missing tool): a stage that catches failures to try something else (a fallback, a search) lets these go."""
    fault = fault_of(error)
    return fault not in KEPT and fault is not Fault.CRASH


def machine_fault(error: BaseException) -> Fault | None:
    """The machine's fault this one exception is (memory, disk, time, interrupt, network, a missing
    tool), or None."""
    if isinstance(error, StageError) and error.fault not in KEPT and error.fault is not Fault.CRASH:
        return error.fault
    for kind, fault in _MACHINE_TYPES:
        if isinstance(error, kind):
            return fault
    if isinstance(error, OSError) and error.errno in DISK_ERRNOS:
        return Fault.DISK
    if isinstance(error, OSError) and error.errno in MEMORY_ERRNOS:
        return Fault.MEMORY
    if isinstance(error, OSError) and error.errno in NETWORK_ERRNOS:
        return Fault.NETWORK
    if _is_url_error(error):
        return Fault.NETWORK
    if isinstance(error, FileNotFoundError) and _starting_a_program(error):
        return Fault.MISSING_TOOL
    if isinstance(error, RuntimeError) and _ALLOCATOR.search(str(error)):
        return Fault.MEMORY
    return None


def _starting_a_program(error: FileNotFoundError) -> bool:
    """subprocess could not start the program (not on this machine): the error is raised where it
    starts one, not by a file the input names."""
    return error.__traceback__ is not None and _raised_at(error).tb_frame.f_code.co_name == "_execute_child"


def _is_url_error(error: BaseException) -> bool:
    """urllib's URLError (an OSError without an errno, the reason inside): not a bad URL's HTTPError."""
    from urllib.error import HTTPError, URLError

    return isinstance(error, URLError) and not isinstance(error, HTTPError)


def _chain(error: BaseException):
    """The exception, what it was raised from, and what it was raised while handling (once each)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


# What a tool run as a separate process (another Vela version, uv, a compiler, a simulator) says
# when the machine failed it, rather than its input: its own words, as Python, the C library and
# uv print them.
_MACHINE_WORDS: tuple[tuple[re.Pattern, Fault], ...] = (
    (re.compile(r"^MemoryError\b|Cannot allocate memory|std::bad_alloc|out of memory", re.I | re.M), Fault.MEMORY),
    # a compiler the kernel killed for memory: the driver says so and exits 1 (GCC: "Killed signal
    # terminated program cc1plus"; also "virtual memory exhausted")
    (re.compile(r"Killed signal terminated program|virtual memory exhausted", re.I), Fault.MEMORY),
    (re.compile(r"No space left on device|Disk quota exceeded|Input/output error|Read-only file system"), Fault.DISK),
)


def fault_in_output(text: str) -> Fault | None:
    """The machine's fault a tool's output names (a traceback ending in MemoryError, 'No space left
    on device'), or None: then its failure is the input's."""
    for pattern, fault in _MACHINE_WORDS:
        if pattern.search(text):
            return fault
    return None


def machine_line(text: str) -> str | None:
    """The line of a tool's output that names the machine's fault ('gcc: fatal error: Killed signal
    terminated program cc1plus'), or None: what a failure's one line should quote."""
    for line in text.splitlines():
        if fault_in_output(line) is not None:
            return line.strip()
    return None


def fault_of_process(returncode: int, output: str = "") -> Fault:
    """The cause of a failed tool process (a compiler, a simulator): killed by SIGKILL (memory), dead
    of another signal (a crash: the input's only if it happens again), or what its output names of
    the machine; else a failure on this input."""
    if returncode < 0:
        return Fault.MEMORY if returncode == -9 else Fault.CRASH
    return fault_in_output(output) or Fault.TOOL


def reproduced(error: BaseException) -> bool:
    """Whether a crash in the exception's chain happened again in a fresh process (see kept)."""
    return any(getattr(link, "reproduced", False) for link in _chain(error))
