"""A job's script process without importing Snakemake.

Every rule runs workflow/scripts/stage.py, whose only work is to hand the job to a warm worker or a
supervised child. Snakemake starts such a script with a preamble that unpickles its `snakemake`
object, and so imports the snakemake package (its shell, utils and logging modules, asyncio):
about 0.14 CPU-seconds, most of a job process's own cost, paid by every job of a sweep
(docs/performance.md, "A job's own process and Snakemake's start"). In the workflow's process `light_preamble()` gives
stage.py a preamble that builds the same items as a `Job` of this module, which imports nothing
but the standard library. Any other script, or a Snakemake whose preamble is not the one this
replaces, keeps Snakemake's own.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Iterable

SCRIPT = os.path.join("workflow", "scripts", "stage.py")
SOURCES = ("input", "output", "params", "wildcards")  # the job's items a stage's parameters take
JOB_SOURCES = (*SOURCES, "resources", "log")  # all that stage.py reads of them


class Named(list):
    """What a job script reads of Snakemake's Namedlist: its values in order, its named items by
    name (`[name]`, `.get`, `.items()`) and attribute."""

    def __init__(self, values: Iterable[Any] = (), names: dict[str, Any] | None = None):
        super().__init__(values)
        self.__dict__["_names"] = dict(names or {})

    def __getitem__(self, key):
        return self._names[key] if isinstance(key, str) else super().__getitem__(key)

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_names"][name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._names.get(name, default)

    def items(self):
        return self._names.items()

    def keys(self):
        return self._names.keys()


class Job:
    """A job's rule, files, params, wildcards, threads and resources, as stage.py reads them."""

    def __init__(self, plain: dict[str, Any]):
        self.rule = plain["rule"]
        self.threads = plain["threads"]
        for source in JOB_SOURCES:
            values, names = plain[source]
            setattr(self, source, Named(values, names))


def plain_job(rule: str, threads: int, **sources: Any) -> dict[str, Any]:
    """Snakemake's items of a job (Namedlists of its file objects) as builtins, for `Job`."""
    return {
        "rule": rule,
        "threads": int(threads),
        **{source: ([_plain(v) for v in items], _plain(dict(items.items()))) for source, items in sources.items()},
    }


def job_items(smk: Any) -> dict[str, Any]:
    """The job's named items as plain JSON values: {"input": {name: path or [paths]}, ...}; what
    travels to the warm worker and is bound to the stage's parameters (ethosweep.runtime.binding)."""
    items = {source: {name: _plain(value) for name, value in getattr(smk, source).items()} for source in SOURCES}
    items["log"] = str(smk.log[0]) if len(smk.log) else None
    items["threads"] = int(smk.threads)
    return items


def _plain(value: Any) -> Any:
    if isinstance(value, str):  # Snakemake's file objects are str
        return str(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # Snakemake's Namedlist is a list
        return [_plain(v) for v in value]
    return str(value)


# The parameters of Snakemake 9's PythonScript.generate_preamble that this preamble reads
PREAMBLE_PARAMETERS = ["path", "cache_path", "source", "basedir", "input_", "output", "params", "wildcards"]
PREAMBLE_PARAMETERS += ["threads", "resources", "log", "config", "rulename"]


def light_preamble() -> bool:
    """Replace Snakemake's Python script preamble for stage.py in this process; False (and
    nothing changed) where this Snakemake's preamble generator is not the one it replaces."""
    import inspect

    try:
        from snakemake.script import PythonScript
    except ImportError:
        return False
    original = PythonScript.__dict__.get("generate_preamble")
    if not isinstance(original, staticmethod):
        return False
    generate = original.__func__
    if getattr(generate, "_ethosweep", False):  # replaced already
        return True
    names = list(inspect.signature(generate).parameters)
    if names[: len(PREAMBLE_PARAMETERS)] != PREAMBLE_PARAMETERS or "preamble_addendum" not in names:
        return False

    def generate_preamble(*args, **kwargs):
        given = {**dict(zip(names, args)), **kwargs}
        own = os.path.normpath(str(given["path"].get_path_or_uri(secret_free=True))).endswith(SCRIPT)
        if not own or given["resources"].get("shell_exec") is not None:
            return generate(*args, **kwargs)
        items = {source: given["input_" if source == "input" else source] for source in JOB_SOURCES}
        job = plain_job(given["rulename"], given["threads"], **items)
        return "".join(
            [
                "######## ethosweep's preamble (ethosweep.runtime.job_script) ########\n",
                "from ethosweep.runtime.job_script import Job, pickle;",
                f"snakemake = Job(pickle.loads({pickle.dumps(job, protocol=4)!r}));",
                f"{given.get('preamble_addendum', '')}\n",
            ]
        )

    generate_preamble._ethosweep = True
    PythonScript.generate_preamble = staticmethod(generate_preamble)
    return True
