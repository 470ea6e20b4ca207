"""Faults made for real, where they are cheap, for the failure contract (tests/test_fault_matrix.py).

`inject(fault)` does what its name says in the process that calls it: a model's forward(), a
stage's step, a tool's child. The fault is chosen by the environment (ETHOSWEEP_TEST_FAULT), so a
test switches it off again without changing any input of the job: what a plain rerun does "once
the fault is gone".
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from pathlib import Path

ENV = "ETHOSWEEP_TEST_FAULT"
# a small filesystem to fill, when the tests could mount one (else a file size limit stands in)
FULL_DISK_ENV = "ETHOSWEEP_TEST_FULL_DISK"

FAULTS = (
    "model error",
    "native crash",
    "SIGKILL",
    "MemoryError",
    "ENOSPC",
    "time limit",
    "interrupt",
    "exit",
    "process exit",
    "torch allocator",
    "network",
)
# a port nothing listens on: a real connection refused, as a download during an outage meets one
UNREACHABLE = "http://127.0.0.1:9/weights.pt"


def active() -> str | None:
    return os.environ.get(ENV) or None


def inject(fault: str | None = None) -> None:
    """Do `fault` (default: the one the environment names; nothing when none is)."""
    fault = fault or active()
    if fault is None:
        return
    if fault == "model error":
        raise ValueError("a model error")
    if fault == "native crash":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if fault == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's out-of-memory killer sends
    if fault == "MemoryError":
        bytearray(1 << 46)  # 64 TiB: the allocation fails, for real
    if fault == "ENOSPC":
        fill_the_disk()
    if fault == "time limit":
        time.sleep(3600)
    if fault == "interrupt":
        # Ctrl-C: KeyboardInterrupt in this process (Python's own handler: a test run started in the
        # background of a non-interactive shell inherits SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    if fault == "exit":
        sys.exit(3)
    if fault == "process exit":
        os._exit(3)
    if fault == "torch allocator":
        torch_allocation_fails()
    if fault == "network":
        import urllib.request

        urllib.request.urlopen(UNREACHABLE, timeout=5)  # URLError: [Errno 111] Connection refused
    raise AssertionError(f"no such fault: {fault}")


def fill_the_disk() -> None:
    """Write until the disk is full: a small filesystem the tests mounted (ENOSPC), or, where they
    could not mount one, a file size limit (the write fails with EFBIG, also a disk fault)."""
    folder = os.environ.get(FULL_DISK_ENV)
    if folder:
        with open(Path(folder) / f"fill-{os.getpid()}", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with open(f"/tmp/ethosweep-fill-{os.getpid()}", "wb") as f:
            f.write(b"\0" * 65536)  # OSError: [Errno 27] File too large
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)  # the job's own log goes on


def torch_allocation_fails() -> None:
    """torch's own allocator failing, as on a machine with a memory limit or strict overcommit: under an
    address-space limit 1 GiB above what the process uses, 16 GiB cannot be had, and torch raises
    RuntimeError "[enforce fail at alloc_cpu.cpp:...] DefaultCPUAllocator: can't allocate memory"."""
    import torch

    limits = resource.getrlimit(resource.RLIMIT_AS)
    used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), limits[1]))
    try:
        torch.empty(1 << 34, dtype=torch.uint8)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
