"""What a job is doing right now, for the message when its process dies.

A job's stage runs in a child process that its supervisor (ethosweep.runtime.supervise) watches,
and native tools run in forks of their own (ethosweep.runtime.isolation). When native code kills
a process (a segmentation fault in a compiler, the kernel's out-of-memory killer), its parent
knows only the signal. Stages mark the stretches that run a tool with `running(tool, detail)`:
the supervisor reads the marks through a pipe, and a fork's parent reads the last one from a
small shared page (a board), so that either names the tool in the failure: "the TOSA reference
model crashed (SIGSEGV) running partition 1 on sample 3".

Outside a supervised job (tests, scripts) the marks go nowhere. Torch-free.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os

_channel: int | None = None  # the write end of the supervisor's pipe, in a supervised job
_boards: list[mmap.mmap] = []  # the shared pages of the forks' parents above this process
BOARD_BYTES = 1024


def report_to(fd: int | None) -> None:
    """Send this process's marks to `fd` (the supervisor sets it in the job's process)."""
    global _channel
    _channel = fd


def new_board() -> mmap.mmap:
    """A page shared with the children forked after this call: they post their marks on it."""
    return mmap.mmap(-1, BOARD_BYTES)


def post_to(board: mmap.mmap) -> None:
    """In a fork: post this process's marks on `board` too (its parent reads it when it dies)."""
    _boards.append(board)


def last_posted(board: mmap.mmap) -> tuple[str, str] | None:
    """The (tool, detail) last marked as running on `board`, or None."""
    text = board[:].split(b"\0", 1)[0].decode("utf-8", "replace")
    try:
        mark = json.loads(text) if text else None
    except ValueError:
        return None
    return tuple(mark) if mark else None


def send(message: dict) -> None:
    if "activity" in message:
        _post(message["activity"])
    if _channel is None:
        return
    try:
        os.write(_channel, (json.dumps(message) + "\n").encode())
    except OSError:  # the supervisor is gone; the job carries on as it would without it
        pass


def _post(mark: list | None) -> None:
    data = json.dumps(mark).encode()[: BOARD_BYTES - 1]
    for board in _boards:
        board[: len(data) + 1] = data + b"\0"


@contextlib.contextmanager
def running(tool: str, detail: str = ""):
    """Mark `tool` (e.g. "Vela") as running, doing `detail` (e.g. "compiling partition 0 for ...")."""
    send({"activity": [tool, detail]})
    try:
        yield
    finally:
        send({"activity": None})
