"""Running one stage of one cell as a Snakemake job.

The thin scripts in workflow/scripts/ call `run_stage` with the library
function to run and plain keyword arguments read from `snakemake.input`,
`.output` and `.params`. This module owns what every job needs: its output
and Python logging go to the job's log file, and a failure ends in one line on
the terminal that names the stage, the cell and the cause (with the log's path
for the traceback), while the job exits non-zero so Snakemake deletes its
partial outputs and carries on with the other cells (--keep-going).

Stages that import torch and ExecuTorch run in a warm worker's fresh fork when
one is available (see ethosweep.worker); everything else runs here. Either way the
stage itself runs in a supervised child process (ethosweep.supervise), so that a
crash in native code, a kill for memory or the rule's wall-clock limit still ends in
a line that says what happened.
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

from ethosweep.errors import FAILURE_PREFIX, StageError
from ethosweep.provenance import tool_versions
from ethosweep.supervise import Limits, run_supervised

# Stage modules that import torch/ExecuTorch (7-15 s per process): worth a warm worker.
WARM_MODULES = ("ethosweep.train", "ethosweep.export", "ethosweep.quantize", "ethosweep.lower",
                "ethosweep.vela", "ethosweep.verify", "ethosweep.bundle", "ethosweep.firmware", "ethosweep.cortex_m",
                "ethosweep.cpu_firmware")


def resolve(ref: str) -> Callable[..., Any]:
    """'package.module:function' -> the function (imported on first use)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def describe_job(rule: str, wildcards: dict[str, str]) -> str:
    """How terminal messages name a job: 'compile_with_vela mnist/int8/ethos-u55-128/...'"""
    return f"{rule} {'/'.join(wildcards.values())}" if wildcards else rule


def run_stage(smk: Any, ref: str, **kwargs: Any) -> None:
    """Run library function `ref` for the Snakemake job `smk` with `kwargs`."""
    request = {
        "ref": ref,
        "kwargs": kwargs,
        "log": str(smk.log[0]),
        "label": describe_job(smk.rule, dict(smk.wildcards.items())),
        "rule": smk.rule,
        "threads": int(smk.threads),
        # what the supervisor holds the job to, and names when it stops it
        "resources": {key: smk.resources.get(key) for key in ("runtime", "mem_mb")},
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "sys_path": list(sys.path),
    }
    outcome = dispatch(request)
    if not outcome["ok"]:
        print(f"ethosweep: FAILED {request['label']}: {outcome['reason']} (log: {request['log']})", file=sys.stderr)
        sys.exit(1)


def dispatch(request: dict[str, Any]) -> dict[str, Any]:
    """Run a request in a warm worker if it pays off and one is available, else here."""
    from ethosweep import worker

    if request["ref"].partition(":")[0] in WARM_MODULES and worker.enabled():
        try:
            return worker.submit(request)
        except (worker.Unavailable, OSError) as error:
            print(f"ethosweep: warm worker unavailable ({error}); running {request['label']} in its own process", file=sys.stderr)
    return execute(request)


def execute(request: dict[str, Any]) -> dict[str, Any]:
    """Run a request's stage in a supervised child, its output in the job's log. Returns {"ok", "reason"}."""
    log_path = Path(request["log"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as log, _redirect_fds(log):
        print(f"ethosweep: {request['label']}", flush=True)
        print(f"ethosweep: tools {tool_versions()}", flush=True)
        started = time.perf_counter()
        limits = Limits.of(request.get("rule", ""), request.get("resources") or {})
        outcome = run_supervised(lambda: run_here(request), limits)
        if outcome["ok"]:
            print(f"ethosweep: done in {time.perf_counter() - started:.1f} s "
                  f"(process peak RSS {outcome['peak_rss_mib']:.0f} MiB)", flush=True)
        else:
            print(f"{FAILURE_PREFIX}{outcome['reason']}", flush=True)
    return {"ok": outcome["ok"], "reason": outcome["reason"]}


def run_here(request: dict[str, Any]) -> dict[str, Any]:
    """Run the request's stage in this process (the supervised child)."""
    _limit_threads(request.get("threads", 1))
    _configure_logging()
    try:
        resolve(request["ref"])(**request["kwargs"])
    except Exception as error:  # noqa: BLE001 - every failure is reported the same way
        if not isinstance(error, StageError):
            traceback.print_exc()
        return {"ok": False, "reason": one_line(error)}
    return {"ok": True, "reason": ""}


def one_line(error: BaseException) -> str:
    """The first meaningful line of an error, prefixed by its type unless it is ours."""
    text = " ".join(str(error).split()) or type(error).__name__
    if len(text) > 400:
        text = text[:397] + "..."
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
