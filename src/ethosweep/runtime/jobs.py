"""Running one stage of one cell as a Snakemake job.

Every rule runs workflow/scripts/stage.py, which calls `run_rule`: the rule names its library
function in `params.stage`, and the job's named inputs, outputs, params and wildcards are bound to
the function's parameters by name (ethosweep.runtime.binding). A rule may name several functions,
run in order in one job: a cell's .pte and its C header are written by one job, because a job of
its own cost a cell as much as Vela does. This module owns what every
job needs: its output and Python logging go to the job's log file, and a failure ends in one line on
the terminal that names the stage, the cell and the cause (with the log's path
for the traceback). Then either the failure is an outcome of the job's inputs (a broken model, a
refusal, a tool crashing on its input): it is recorded in place of the job's outputs and the job
succeeds, so the cell's later stages and the summary carry it (ethosweep.runtime.outcome); or it
may not recur (memory, time limit, interruption): the job exits non-zero, Snakemake deletes its
partial outputs, carries on with the other cells (--keep-going) and the next run retries it.

Stages that import torch and ExecuTorch run in a warm worker's fresh fork when
one is available (see ethosweep.runtime.worker); everything else runs here. Either way the
stage itself runs in a supervised child process (ethosweep.runtime.supervise), so that a
crash in native code, a kill for memory or the rule's wall-clock limit still ends in
a line that says what happened.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ethosweep.runtime.job_script import job_items
from ethosweep.runtime.outcome import describe, failure_record, first_failure, stage_of_log, write_failure

# Stage modules that import torch or ExecuTorch (7-15 s per process): worth a warm worker.
# tests/test_layout.py checks that this is exactly the stage modules whose code imports them.
WARM_MODULES = (
    "ethosweep.zoo.train",
    "ethosweep.compile.export",
    "ethosweep.compile.quantize",
    "ethosweep.compile.lower",
    "ethosweep.compile.cortex_m",
    "ethosweep.vela.compile",
    "ethosweep.verify.numerics",
    "ethosweep.deploy.bundled_program",
    "ethosweep.firmware.qemu",
)


# Torch-free stages whose libraries (matplotlib, jinja2) are slow to import: they run in a warm worker
# that is already serving (at the end of a run that compiled anything, it is), never worth starting
# one for. The server imports those libraries too (ethosweep.runtime.worker.PRELOAD).
WARM_IF_SERVING = ("ethosweep.results.report.plots", "ethosweep.results.report.index", "ethosweep.results.report.cells")


def describe_job(rule: str, wildcards: dict[str, str]) -> str:
    """How terminal messages name a job: 'compile_with_vela mnist/int8/ethos-u55-128/...' (a cell
    of another Vela version ends in '@vela-<version>', as its path does)."""
    if not wildcards:
        return rule
    parts = [v for v in wildcards.values() if v]
    # a tag (matrix.cell.VELA_TAG, the one wildcard that starts with '@') ends the part before it
    return f"{rule} " + "".join(v if i == 0 or v.startswith("@") else "/" + v for i, v in enumerate(parts))


def run_rule(smk: Any) -> None:
    """Run the library function the rule names in `params.stage` (or each of a list, in order) with
    the job's named items bound to its parameters by name (ethosweep.runtime.binding). The rule's
    `params` may also say how the job ends (see run_stages): `directories` (names of directory
    outputs), `aggregate`, `reads_failures` (names of inputs)."""
    stage = smk.params.stage
    job = job_items(smk)
    run_stages(
        smk,
        *[(ref, {}) for ref in ([stage] if isinstance(stage, str) else stage)],
        directories=[str(smk.output[name]) for name in smk.params.get("directories", [])],
        aggregate=bool(smk.params.get("aggregate", False)),
        reads_failures=smk.params.get("reads_failures", ()),
        job=job,
    )


def run_stages(
    smk: Any,
    *steps: tuple[str, dict[str, Any]],
    directories: Sequence[str] = (),
    aggregate: bool = False,
    reads_failures: Sequence[str] = (),
    job: dict[str, Any] | None = None,
) -> None:
    """Run each (library function, kwargs) step in order for the Snakemake job `smk`: one log,
    one supervised process; the first failing step ends the job.

    How the job ends (ethosweep.runtime.outcome): a failure of its inputs is recorded in place of
    its outputs (`directories`: those of them that are directory outputs) and the job succeeds; any
    other failure fails the job. A job whose input is a record passes it on without running, unless
    it is an `aggregate` (summary, report, firmware plan) that reads every cell's outcome itself;
    an aggregate's own failure is never recorded (the end of a run describes every cell, or fails).
    `reads_failures`: names of inputs the stage reads itself, record or not (it does without them).
    `job`: the job's items (ethosweep.runtime.binding.job_items), bound to each step's function by
    name where it runs, besides the step's own kwargs."""
    label = describe_job(smk.rule, dict(smk.wildcards.items()))
    if not aggregate:
        upstream = first_failure(_job_inputs(smk, reads_failures))
        if upstream is not None:
            _pass_on(smk, upstream, directories, label)
            return
    request = _request(smk, steps, job, label)
    stored = _in_store(smk, [ref for ref, _ in steps], job)
    if stored is not None and _restored(smk, *stored, job, label):
        return
    outcome = dispatch(request)
    if outcome["ok"]:
        _forget_faults(request["log"])
        if stored is not None:
            _store(smk, *stored, job, label)
        return
    failed = "" if (outcome.get("details") or {}).get("does_not_fit") else "FAILED "  # its reason says it
    print(f"ethosweep: {failed}{label}: {outcome['reason']} (log: {request['log']})", file=sys.stderr)
    if not aggregate and not outcome.get("recorded"):
        outcome = _recurring(smk, outcome, request, job)
    if aggregate or not outcome.get("recorded"):
        # may not recur, or the end of the run itself could not be written: Snakemake deletes
        # the outputs, and the next run retries the job
        sys.exit(1)
    record = failure_record(
        stage_of_log(request["log"], smk.rule),
        outcome["reason"],
        request["log"],
        label,
        output=str(smk.output[0]),
        reproducer=outcome.get("reproducer"),
        details=outcome.get("details"),
    )
    write_failure(record, _files(smk, directories), directories)


# A machine fault that happens the same way this many runs in a row is recorded, like the cell's own
# failures, so that the run still ends in its summary and report: memory that never suffices, a tool
# that always hangs. Counted per job and per job key (its inputs, code and settings): any change starts over.
RECURRENCES = 3
RECURRING = {"MEMORY": "ran out of memory", "TIME": "reached its time limit"}


def _request(smk: Any, steps: tuple, job: dict[str, Any] | None, label: str) -> dict[str, Any]:
    """What the supervisor runs: the steps, with the job's log, threads, resources and environment."""
    return {
        "steps": [{"ref": ref, "kwargs": kwargs, "job": job} for ref, kwargs in steps],
        "log": str(smk.log[0]),
        "label": label,
        "rule": smk.rule,
        "threads": int(smk.threads),
        # what the supervisor holds the job to, and names when it stops it
        "resources": {key: smk.resources.get(key) for key in ("runtime", "mem_mb")},
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "sys_path": list(sys.path),
    }


def _recurring(smk: Any, outcome: dict, request: dict, job: dict[str, Any] | None) -> dict:
    """The outcome with `recorded` set once its machine fault (memory, time) has happened
    RECURRENCES runs in a row for this job and key, said with what to change; else as it was."""
    from ethosweep.runtime import cache

    fault = outcome.get("fault")
    if fault not in RECURRING:
        _forget_faults(request["log"])
        return outcome
    tally = _fault_tally(request["log"])
    key = cache.key(smk.rule, [step["ref"] for step in request["steps"]], job or {})
    earlier = tally.get("faults", []) if tally.get("key") == key else []
    faults = [*earlier, fault][-RECURRENCES:]
    tally_path = _fault_tally_path(request["log"])
    tally_path.write_text(json.dumps({"key": key, "faults": faults}))
    if len(faults) < RECURRENCES or set(faults) != {fault}:
        return outcome
    resource = "mem_mb=<MB>" if fault == "MEMORY" else "runtime=<minutes>"
    what = "give the job more memory, or run fewer jobs at once" if fault == "MEMORY" else "raise its time limit"
    reason = (
        f"{RECURRING[fault]} {RECURRENCES} times in a row ({outcome['reason']}): {what} "
        f"(--set-resources {smk.rule}:{resource}), then retry it with --forcerun $(uv run ethosweep failed)"
    )
    print(f"ethosweep: recorded: {reason}", file=sys.stderr)
    return {**outcome, "recorded": True, "reason": reason}


def _fault_tally_path(log: str) -> Path:
    """Where a job's recent machine faults are counted: beside Snakemake's own bookkeeping, by the
    job's log path (not an output: nothing downstream reads it)."""
    path = Path(".snakemake", "ethosweep", "faults", f"{Path(log).as_posix().lstrip('/')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _fault_tally(log: str) -> dict:
    try:
        return json.loads(_fault_tally_path(log).read_text())
    except (OSError, ValueError):
        return {}


def _forget_faults(log: str) -> None:
    path = Path(".snakemake", "ethosweep", "faults", f"{Path(log).as_posix().lstrip('/')}.json")
    path.unlink(missing_ok=True)


def _in_store(smk: Any, stages: list[str], job: dict[str, Any] | None) -> tuple[Path, str] | None:
    """(the store, the job's key) for a rule that asks for the store (`params.cache`) when one is set
    (ethosweep.runtime.cache); None otherwise."""
    if job is None or not smk.params.get("cache"):
        return None
    from ethosweep.runtime import cache  # imported by the jobs that may use the store, not every job

    root = cache.store()
    if root is None:
        return None
    try:
        return root, cache.key(smk.rule, stages, job)
    except OSError as error:  # an input that cannot be read: the stage says so itself
        print(f"ethosweep: the cache is not used for {smk.rule}: {error}", file=sys.stderr)
        return None


def _restored(smk: Any, root: Path, key: str, job: dict[str, Any], label: str) -> bool:
    """The job's outputs from the store, if it holds them whole; the job's log says where from."""
    from ethosweep.runtime import cache

    try:
        manifest = cache.restore(root, key, cache.outputs_of(job))
    except OSError as error:
        print(f"ethosweep: the cache could not be read ({error}); running {label}", file=sys.stderr)
        return False
    if manifest is None:
        return False
    log = Path(str(smk.log[0]))
    log.parent.mkdir(parents=True, exist_ok=True)
    made = time.strftime("%Y-%m-%d %H:%M", time.localtime(manifest.get("stored", 0)))
    log.write_text(
        f"ethosweep: {label}\nethosweep: taken from the cache: {root / key[:2] / key} (computed {made} as "
        f"{manifest.get('label', '?')}); its log then:\n{manifest.get('log', '')}"
    )
    return True


def _store(smk: Any, root: Path, key: str, job: dict[str, Any], label: str) -> None:
    from ethosweep.runtime import cache

    log = Path(str(smk.log[0]))
    text = log.read_text(errors="replace")[-200_000:] if log.exists() else ""
    if cache.put(root, key, cache.outputs_of(job), {"rule": smk.rule, "label": label, "log": text}):
        cache.prune_quietly(root)


def _job_inputs(smk: Any, leaving_out: Sequence[str] = ()) -> list[str]:
    skip = {str(smk.input.get(name)) for name in leaving_out if smk.input.get(name)}
    return [str(path) for path in smk.input if str(path) not in skip]


def _files(smk: Any, directories: Sequence[str]) -> list[str]:
    skip = set(map(str, directories))
    return [str(path) for path in smk.output if str(path) not in skip]


def _pass_on(smk: Any, record: dict, directories: Sequence[str], label: str) -> None:
    """An input is a failure record: this job's stage cannot run; its outputs carry the record on."""
    log = Path(str(smk.log[0]))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"ethosweep: {label}\nethosweep: not run: {describe(record)} (log: {record['log']})\n")
    write_failure(record, _files(smk, directories), directories)


def dispatch(request: dict[str, Any]) -> dict[str, Any]:
    """Run a request in a warm worker if it pays off and one is available, else here."""
    modules = {step["ref"].partition(":")[0] for step in request["steps"]}
    warm, if_serving = bool(modules.intersection(WARM_MODULES)), bool(modules.intersection(WARM_IF_SERVING))
    if not (warm or if_serving):
        return _execute_here(request)
    from ethosweep.runtime import worker  # only these stages' clients need it

    if worker.enabled():
        try:
            outcome = worker.submit(request) if warm else worker.submit_if_serving(request)
            if outcome is not None:
                return outcome
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
