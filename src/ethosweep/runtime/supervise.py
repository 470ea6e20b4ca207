"""Running a job's stage in a child process, and saying in one line what became of it.

A stage runs native code (ExecuTorch's lowering, Vela, the TOSA reference model, torch):
when that code crashes, the process running it dies without a Python traceback. So the
stage runs in a forked child, and its parent (the supervisor) waits for it and turns
what it sees into the job's failure reason:

- a signal: which one, and which tool was running (the child marks tools with
  ethosweep.runtime.activity.running): "the TOSA reference model crashed (SIGSEGV) running
  partition 1 on sample 3";
- SIGKILL: almost always the kernel's out-of-memory killer (or a cluster's memory
  limit); the supervisor checks the cgroup's OOM counter and names the job's peak memory
  and the mem_mb its rule declares;
- the wall-clock limit: the rule's `runtime` resource (minutes; the default profile
  sets a generous default, `--set-resources RULE:runtime=M` changes it). Past it the
  child and everything it started are stopped.

The child gets its own process group, so that stopping it also stops the tools it
started, and dies with its supervisor (PR_SET_PDEATHSIG), so no orphan keeps writing
outputs after Snakemake stopped the job. Torch-free.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ethosweep.runtime import activity
from ethosweep.runtime.errors import Fault, Stopped
from ethosweep.runtime.isolation import crash_traces_to_log, flush_standard_streams, signal_name

# How long a stopped job gets to clean up (temporary files, atomic writes) before SIGKILL.
GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Limits:
    """What the job's rule declares: its name, its wall-clock limit and memory."""

    rule: str = ""
    runtime_minutes: float | None = None
    mem_mb: int | None = None

    @classmethod
    def of(cls, rule: str, resources: dict) -> "Limits":
        def number(key):
            value = resources.get(key)
            return value if isinstance(value, (int, float)) and value > 0 else None

        return cls(rule=rule, runtime_minutes=number("runtime"), mem_mb=number("mem_mb"))


@dataclass
class Ending:
    """How the child ended, as the supervisor saw it."""

    outcome: dict | None  # what the child reported, if it got that far
    signal_name: str | None
    exit_code: int | None
    timed_out: bool
    peak_rss_mib: float
    cpu_seconds: float  # the child's and its tools' CPU time: what the job costs, whatever else runs
    oom_killed: bool
    activity: tuple[str, str] | None  # the tool running when it ended, and what it did


def run_supervised(run: Callable[[], dict], limits: Limits) -> dict:
    """`run()` in a forked child; its outcome {"ok", "reason", "fault", ...}, with `peak_rss_mib`.
    A child that ended without reporting (or was stopped after it did) has the fault its ending
    shows (fault_of_ending)."""
    ending = _run_in_child(run, limits)
    outcome = dict(ending.outcome) if ending.outcome is not None else None
    if outcome is None or ending.signal_name or ending.timed_out:  # it reported, then was stopped
        outcome = {"ok": False, "reason": describe(ending, limits), "fault": fault_of_ending(ending).name}
    outcome["peak_rss_mib"] = round(ending.peak_rss_mib, 1)
    outcome["cpu_seconds"] = round(ending.cpu_seconds, 2)
    return outcome


def fault_of_ending(ending: Ending) -> Fault:
    """What a child's death says of its cause: its wall-clock limit (time), SIGKILL (memory),
    any other signal or an exit without a result (a crash, the input's only if it happens again)."""
    if ending.timed_out:
        return Fault.TIME
    if ending.signal_name == "SIGKILL":
        return Fault.MEMORY
    if ending.signal_name in ("SIGINT", "SIGTERM", "SIGHUP"):
        return Fault.INTERRUPT
    return Fault.CRASH


def describe(ending: Ending, limits: Limits) -> str:
    """The one-line reason for a child that ended without a result."""
    tool, detail = ending.activity or ("the job", "")
    rule = limits.rule or "<rule>"
    memory = f"peak memory {ending.peak_rss_mib:,.0f} MiB" + (
        f", the rule declares mem_mb={limits.mem_mb:g}" if limits.mem_mb else ""
    )
    if ending.timed_out:
        return (
            f"stopped at its wall-clock limit of {limits.runtime_minutes:g} min (resources.runtime of "
            f"{rule}): {tool} was still {detail or 'running'}; raise it with "
            f"--set-resources {rule}:runtime=<minutes>"
        )
    while_doing = f" while {detail}" if detail else ""
    if ending.signal_name == "SIGKILL":
        how = (
            "was killed by the kernel's out-of-memory killer" + while_doing
            if ending.oom_killed
            else f"was killed (SIGKILL){while_doing}, most likely for memory"
        )
        return f"{tool} {how} ({memory}; raise it with --set-resources {rule}:mem_mb=<MB>, or run fewer jobs at once)"
    if ending.signal_name:
        return f"{tool} crashed ({ending.signal_name}){' ' + detail if detail else ''}"
    return f"{tool} ended with exit status {ending.exit_code} without a result{while_doing}"


# ---- the child -------------------------------------------------------------------------


def _run_in_child(run: Callable[[], dict], limits: Limits) -> Ending:
    flush_standard_streams()
    oom_before = oom_kills()
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        gc.freeze()  # the GC leaves the inherited objects alone (see ethosweep.runtime.worker)
        _become_job(parent)
        crash_traces_to_log()
        activity.report_to(write_end)
        status = 1
        try:
            outcome = run()
            activity.send({"outcome": outcome})
            status = 0 if outcome.get("ok") else 1
        finally:
            flush_standard_streams()
            os._exit(status)
    os.close(write_end)
    try:
        return _watch(pid, read_end, limits, oom_before)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): stop the job too, then go
        _stop(pid)
        _reap(pid)
        raise
    finally:
        os.close(read_end)


def _become_job(parent: int) -> None:
    """In the child: its own process group, and it dies with the supervisor."""
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own stop handles it
        pass
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(1)
    # SIGTERM (Snakemake stopping the job, the supervisor's limit) unwinds like an
    # exception, so temporary files and half-written outputs are removed; Stopped is neither an
    # Exception nor SystemExit, so no stage takes it for a failure of its own (or of its model).
    signal.signal(signal.SIGTERM, _raise_stopped)


def _raise_stopped(signum, frame):
    raise Stopped(f"stopped by {signal_name(signum)}")


def _watch(pid: int, channel: int, limits: Limits, oom_before: int | None) -> Ending:
    deadline = time.monotonic() + limits.runtime_minutes * 60 if limits.runtime_minutes else None
    exited = _exit_fd(pid)
    buffer, outcome, current, timed_out = b"", None, None, False
    try:
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if exited is None:  # no pidfd: look at the child at least every 0.2 s
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            ready, _, _ = select.select([fd for fd in (exited, channel) if fd is not None], [], [], timeout)
            if exited is None and _has_exited(pid):
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                _stop(pid)
                break
            if not ready:
                continue
            if channel in ready:
                chunk = _read(channel)
                if chunk:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        message = json.loads(line)
                        if "outcome" in message:
                            outcome = message["outcome"]
                        elif "activity" in message:
                            current = tuple(message["activity"]) if message["activity"] else None
                    continue
            if exited in ready:
                break
    finally:
        if exited is not None:
            os.close(exited)
    _, status, usage = os.wait4(pid, 0)
    _kill_group(pid, signal.SIGKILL)  # whatever it started and left behind (a tool's own child)
    died_of = signal_name(os.WTERMSIG(status)) if os.WIFSIGNALED(status) else None
    return Ending(
        outcome=outcome,
        signal_name=None if timed_out else died_of,
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        timed_out=timed_out,
        peak_rss_mib=usage.ru_maxrss / 1024,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        oom_killed=died_of == "SIGKILL" and oom_before is not None and (oom_kills() or 0) > oom_before,
        activity=current,
    )


def _exit_fd(pid: int) -> int | None:
    """A file descriptor that becomes readable when the child exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _has_exited(pid: int) -> bool:
    """Whether the child has ended, without reaping it (wait4 collects it with its rusage)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EINTR):
            return b""
        raise


def _stop(pid: int) -> None:
    """SIGTERM to the child's process group, SIGKILL after the grace period."""
    _kill_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline:
        if _has_exited(pid):
            return
        time.sleep(0.05)
    _kill_group(pid, signal.SIGKILL)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer ended in this process's memory cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            candidates = [
                Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events",
                Path("/sys/fs/cgroup/unified") / path.lstrip("/") / "memory.events",
            ]
        elif "memory" in controllers.split(","):  # cgroup v1
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"]
        else:
            continue
        for candidate in candidates:
            try:
                for entry in candidate.read_text().splitlines():
                    key, _, value = entry.partition(" ")
                    if key == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                continue
    return None
