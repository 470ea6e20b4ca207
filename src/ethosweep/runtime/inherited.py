"""Values the Snakemake process computes once and its jobs inherit through the environment.

Looking up package versions reads package metadata (~20 ms for a handful); a sweep runs
hundreds of jobs, each a new process, and each used to look up the same versions again. A
value is only taken by a process running the same interpreter and the same ethosweep
checkout as the one that exported it: a job in another environment (`--sdm conda`)
computes its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

_PREFIX = "ETHOSWEEP_INHERITED_"
_CHECKOUT = str(Path(__file__).resolve().parents[1])


def inherited(name: str, compute: Callable[[], Any]) -> Any:
    """The value exported under `name` for this interpreter and checkout, else `compute()`."""
    try:
        record = json.loads(os.environ[_PREFIX + name])
    except (KeyError, ValueError):
        return compute()
    if record.get("python") != sys.executable or record.get("checkout") != _CHECKOUT:
        return compute()
    return record["value"]


def export(name: str, value: Any) -> None:
    """Make `value` what this process's children (Snakemake's jobs) inherit under `name`."""
    os.environ[_PREFIX + name] = json.dumps({"python": sys.executable, "checkout": _CHECKOUT, "value": value})
