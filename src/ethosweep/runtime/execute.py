"""Executing one job's stage: its output in the job's log, supervised, ending in one outcome.

Used by the job's own process (ethosweep.runtime.jobs, when no warm worker runs it) and by the
warm worker's fresh fork (ethosweep.runtime.worker): both import this module, neither imports
the other's.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ethosweep.runtime.binding import bind
from ethosweep.runtime.errors import (
    FAILURE_PREFIX,
    Fault,
    StageError,
    Stopped,
    fault_of,
    innermost,
    kept,
    raised_in_ethosweep,
    reproduced,
    where_raised,
)
from ethosweep.runtime.outcome import REASON_CHARS
from ethosweep.runtime.provenance import tool_versions
from ethosweep.runtime.supervise import Limits, run_supervised


def resolve(ref: str) -> Callable[..., Any]:
    """'package.module:function' -> the function (imported on first use)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def execute(request: dict[str, Any]) -> dict[str, Any]:
    """Run a request's stage in a supervised child, its output in the job's log. Returns {"ok",
    "reason", "fault" (its cause's name, ethosweep.runtime.errors.Fault), "recorded" (the cell's own
    failure, kept: ethosweep.runtime.outcome), "reproducer", "details"}.

    This is where a failure is classed: by its cause (ethosweep.runtime.errors.kept). A crash of the
    stage's process is run once more in a fresh one; only a crash that happens again is kept."""
    log_path = Path(request["log"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as log, _redirect_fds(log):
        print(f"ethosweep: {request['label']}", flush=True)
        print(f"ethosweep: tools {tool_versions()}", flush=True)
        started = time.perf_counter()
        limits = Limits.of(request.get("rule", ""), request.get("resources") or {})
        outcome = run_supervised(lambda: run_here(request), limits)
        if _crash_to_retry(outcome):
            print(f"ethosweep: {outcome['reason']}; running the stage once more in a fresh process", flush=True)
            outcome = run_supervised(lambda: run_here(request), limits)
            if _crash_to_retry(outcome):
                outcome = {**outcome, "reproduced": True, "reason": f"{outcome['reason']} (again in a fresh process)"}
        fault = Fault[outcome.get("fault") or Fault.TOOL.name]
        recorded = not outcome["ok"] and kept(fault, bool(outcome.get("reproduced")))
        if outcome["ok"] or recorded:  # what it cost, for the next run's estimate (ethosweep.runtime.estimate)
            print(
                f"ethosweep: {'done' if outcome['ok'] else 'recorded'} in {time.perf_counter() - started:.1f} s "
                f"(CPU {outcome.get('cpu_seconds', 0):.1f} s, process peak RSS {outcome['peak_rss_mib']:.0f} MiB)",
                flush=True,
            )
        if not outcome["ok"]:
            then = "recorded" if recorded else "the job fails; the next run retries it"
            print(f"ethosweep: cause: {fault.value}; {then}", flush=True)
            print(f"{FAILURE_PREFIX}{outcome['reason']}", flush=True)
    return {
        "ok": outcome["ok"],
        "reason": outcome["reason"],
        "fault": None if outcome["ok"] else fault.name,
        "recorded": recorded,
        "reproducer": outcome.get("reproducer"),
        "details": outcome.get("details") or {},
    }


def _crash_to_retry(outcome: dict) -> bool:
    return not outcome["ok"] and outcome.get("fault") == Fault.CRASH.name and not outcome.get("reproduced")


def run_here(request: dict[str, Any]) -> dict[str, Any]:
    """Run the request's steps in order in this process (the supervised child). A step's exception
    is reported with its cause (ethosweep.runtime.errors.fault_of), classed here where its chain is
    whole; SystemExit too (code the stage ran called sys.exit: a failure like any other)."""
    _limit_threads(request.get("threads", 1))
    _configure_logging()
    for step in request["steps"]:
        try:
            function = resolve(step["ref"])
            bound = bind(function, step["job"], request.get("rule", "the rule")) if step.get("job") else {}
            function(**bound, **step["kwargs"])
        except (Exception, SystemExit, KeyboardInterrupt, Stopped) as error:  # noqa: BLE001 - reported alike
            if not isinstance(error, StageError):
                traceback.print_exc()
            fault = fault_of(error)
            details = dict(getattr(error, "details", None) or {})
            reason = one_line(error)
            if fault is Fault.BUG:
                root = innermost(error)
                where = f" (at {where_raised(root)})" if raised_in_ethosweep(root) else ""
                reason = (
                    f"this is a bug in ethosweep, not in your model: {one_line(root)}{where}; the log has its traceback"
                )
                details["traceback"] = "".join(traceback.format_exception(error))
            return {
                "ok": False,
                "reason": reason,
                "fault": fault.name,
                "reproduced": reproduced(error),
                "reproducer": getattr(error, "reproducer", None),
                # what else the stage found out about it (a Vela refusal: the operators refused)
                "details": details,
            }
    return {"ok": True, "reason": ""}


def one_line(error: BaseException) -> str:
    """The first meaningful line of an error, prefixed by its type unless it is ours."""
    if isinstance(error, SystemExit):
        return f"the stage's code called sys.exit({error.code!r})"
    if isinstance(error, (KeyboardInterrupt, Stopped)):
        return f"interrupted ({type(error).__name__}{': ' + str(error) if str(error) else ''})"
    text = " ".join(str(error).split()) or type(error).__name__
    if len(text) > REASON_CHARS:
        text = text[: REASON_CHARS - 3] + "..."
    return text if isinstance(error, StageError) else f"{type(error).__name__}: {text}"


def _limit_threads(threads: int) -> None:
    """Use the threads Snakemake gave the job, not every core (jobs run side by side)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:  # a warm worker imported it already
        sys.modules["torch"].set_num_threads(threads)


@contextlib.contextmanager
def _redirect_fds(log):
    """Send fds 1 and 2 (Python and C-level output: Vela, torch warnings) to the log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # ExecuTorch passes --verbose-all to Vela when its logger is at INFO:
    # megabytes of log per cell, so only ethosweep's own messages are at INFO.
    logging.getLogger("ethosweep").setLevel(logging.INFO)
