"""Recorded failures: how a job that failed for a reason that cannot change by itself ends.

A sweep must report every cell, failed ones included, and only rules may write the summary
and the report (anything written beside Snakemake's bookkeeping may later be taken for the
output of a run that never made it). So a job whose stage fails *deterministically* (a broken
model, an operator the partitioner or Vela refuses, a tool that crashes on its input) does not
fail as a Snakemake job: it writes a failure record in place of each of its declared outputs
and exits 0. Snakemake records the job like any other (its params, code and tool versions), so
the failure is kept by a plain rerun and redone exactly when something it depends on changes.

A record is a small JSON document, `{"ethosweep_failed": {...}}`, in place of each output file
(a .pte holding it is not a program: every reader asks `failure_of` first) and as `FAILED.json`
inside each output directory. Jobs downstream of a record do not run their stage: they pass the
record on to their own outputs (ethosweep.runtime.jobs), so a cell's last outputs say where and
why its chain stopped, and the end-of-run rules read them like any other outcome.

A failure that may not happen again (killed for memory, a wall-clock limit, an interruption,
the job's own process crashing, a damaged input file) is not recorded: the job fails, Snakemake
deletes its outputs, and the next run retries it.

Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from ethosweep.runtime.io import atomic_write_text

KEY = "ethosweep_failed"
# The record inside a directory output (the lower stage's `tosa/`, a deployment bundle).
IN_DIRECTORY = "FAILED.json"
_PREFIX = b'{"' + KEY.encode() + b'"'
# how long a failure's reason may be in its record (ethosweep.runtime.execute.one_line cuts it)
REASON_CHARS = 400


def failure_of(path: str | os.PathLike) -> dict | None:
    """The failure record written in place of `path` (a file or a directory output), or None
    for a real artifact (or a path that does not exist)."""
    path = Path(path)
    if path.is_dir():
        path = path / IN_DIRECTORY
    try:
        with open(path, "rb") as f:
            if f.read(len(_PREFIX)) != _PREFIX:
                return None
            f.seek(0)
            return json.loads(f.read().decode("utf-8"))[KEY]
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def first_failure(paths: Iterable[str | os.PathLike]) -> dict | None:
    """The record among `paths` (in order), if any is one."""
    for path in paths:
        record = failure_of(path)
        if record is not None:
            return record
    return None


def write_failure(record: dict, files: Iterable[str], directories: Iterable[str] = ()) -> None:
    """Put `record` in place of every output: each file becomes the record, each directory holds
    only the record (what a stage left there half-done is removed)."""
    import shutil  # on a failure's path only: not in every job's client

    text = json.dumps({KEY: record}, sort_keys=True) + "\n"  # one line, starting with the key failure_of looks for
    for folder in map(Path, directories):
        if folder.is_file():
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / IN_DIRECTORY, text)
    for file in files:
        if Path(file).is_dir():
            shutil.rmtree(file)
        atomic_write_text(file, text)


def failure_record(
    stage: str, reason: str, log: str, job: str, output: str, reproducer: str | None = None, details: dict | None = None
) -> dict:
    """What a failed stage records: which stage, why (one line), where its log and reproducer are,
    the failed job's first output (`snakemake --forcerun <output>` retries it), and what else the
    stage found out (`details`: the operators Vela refused)."""
    return {
        "stage": stage,
        "reason": reason,
        "log": log,
        "job": job,
        "output": output,
        **({"reproducer": reproducer} if reproducer else {}),
        **(details or {}),
    }


def stage_of_log(log: str, rule: str) -> str:
    """A job's stage, as its log's folder names it (logs/<stage>/...: the house convention)."""
    parts = Path(log).parts
    return parts[1] if len(parts) > 2 and parts[0] == "logs" else rule


def describe(record: dict) -> str:
    """'export: model 'x' (models/x.py): ...': the failed stage and its reason, as tables show it."""
    return f"{record['stage']}: {record['reason']}"
