"""Running one stage of one cell as a Snakemake job.

The thin scripts in workflow/scripts/ call `run_stage` with the library
function to run and plain keyword arguments read from `snakemake.input`,
`.output` and `.params` (or `run_stages` with several such steps, run in order
in one job: a cell's .pte and its C header are written by one job, because a
job of its own cost a cell as much as Vela does). This module owns what every
job needs: its output and Python logging go to the job's log file, and a failure ends in one line on
the terminal that names the stage, the cell and the cause (with the log's path
for the traceback), while the job exits non-zero so Snakemake deletes its
partial outputs and carries on with the other cells (--keep-going).

Stages that import torch and ExecuTorch run in a warm worker's fresh fork when
one is available (see ethosweep.runtime.worker); everything else runs here. Either way the
stage itself runs in a supervised child process (ethosweep.runtime.supervise), so that a
crash in native code, a kill for memory or the rule's wall-clock limit still ends in
a line that says what happened.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Stage modules that import torch or ExecuTorch (7-15 s per process): worth a warm worker.
# tests/test_layout.py checks that this is exactly the stage modules whose code imports them.
WARM_MODULES = (
    "ethosweep.compile.train",
    "ethosweep.compile.export",
    "ethosweep.compile.quantize",
    "ethosweep.compile.lower",
    "ethosweep.compile.cortex_m",
    "ethosweep.vela.compile",
    "ethosweep.verify.numerics",
    "ethosweep.deploy.bundle",
    "ethosweep.firmware.executor_runner",
    "ethosweep.firmware.qemu",
)


def describe_job(rule: str, wildcards: dict[str, str]) -> str:
    """How terminal messages name a job: 'compile_with_vela mnist/int8/ethos-u55-128/...' (a cell
    of another Vela version ends in '@vela-<version>', as its path does)."""
    if not wildcards:
        return rule
    return f"{rule} {'/'.join(v for v in wildcards.values() if v)}".replace("/@vela-", "@vela-")


def run_stage(smk: Any, ref: str, **kwargs: Any) -> None:
    """Run library function `ref` for the Snakemake job `smk` with `kwargs`."""
    run_stages(smk, (ref, kwargs))


def run_stages(smk: Any, *steps: tuple[str, dict[str, Any]]) -> None:
    """Run each (library function, kwargs) step in order for the Snakemake job `smk`: one log,
    one supervised process; the first failing step ends the job."""
    request = {
        "steps": [{"ref": ref, "kwargs": kwargs} for ref, kwargs in steps],
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
    if not any(step["ref"].partition(":")[0] in WARM_MODULES for step in request["steps"]):
        return _execute_here(request)
    from ethosweep.runtime import worker  # only the torch stages' clients need it

    if worker.enabled():
        try:
            return worker.submit(request)
        except (worker.Unavailable, OSError) as error:
            print(
                f"ethosweep: warm worker unavailable ({error}); running {request['label']} in its own process",
                file=sys.stderr,
            )
    return _execute_here(request)


def _execute_here(request: dict[str, Any]) -> dict[str, Any]:
    # imported on this path only: a job the warm worker runs never needs it in the client
    from ethosweep.runtime.execute import execute

    return execute(request)
