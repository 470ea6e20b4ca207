"""The third-party packages a stage runs, and their versions: what makes a toolchain upgrade stale.

Snakemake reruns a job when its params change. Each rule passes the versions of the
distributions its stage runs (as its `code` param passes the hash of its library code), so
upgrading Vela reruns the Vela jobs and what reads them, and never an export or a lowering.

The set is derived the way ethosweep.runtime.codeversion derives the code a stage runs: from
the imports in the stage module's closure (function-level imports included, read with `ast`,
nothing imported), each top-level module mapped to the distribution that installs it. Two
kinds of code run without our code importing them, and are added:

- a tool that a package we import runs on the stage's behalf, which the stage module names in
  a module-level tuple `ALSO_RUNS` (ExecuTorch's Arm lowering writes TOSA with tosa-tools'
  serializer; its `vela_compile` runs ethos-u-vela). Naming it there, not here, keeps the
  knowledge beside the code that relies on it;
- a model's own code (`model_packages`): a model file's imports, or the package an `import:`
  model comes from (torchvision's mobilenet_v2 changes with torchvision).

Looked up once per Snakemake process (parse time); torch-free.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ethosweep.runtime.codeversion import PACKAGE, closure, module_path

ALSO_RUNS = "ALSO_RUNS"


def imported_top_levels(source: str) -> set[str]:
    """The top-level names of the absolute imports in Python `source` (standard library and
    ethosweep left out)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != PACKAGE}


def declared_tools(source: str) -> set[str]:
    """The distributions a stage module names in its module-level ALSO_RUNS tuple."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == ALSO_RUNS for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


@lru_cache(maxsize=1)
def _distributions_of_modules() -> dict[str, tuple[str, ...]]:
    # ~0.2 s over this environment's ~150 distributions, once per process
    return {name: tuple(dists) for name, dists in metadata.packages_distributions().items()}


def distributions(top_levels: set[str]) -> set[str]:
    """The installed distributions that provide these top-level modules (unknown names are left
    out: a module of the workflow's own, or one that is not installed)."""
    mapping = _distributions_of_modules()
    return {dist for name in top_levels for dist in mapping.get(name, ())}


@lru_cache(maxsize=None)
def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


@lru_cache(maxsize=None)
def stage_packages(*modules: str) -> tuple[str, ...]:
    """The distributions the stage modules run: their closures' imports and their ALSO_RUNS."""
    dists: set[str] = set()
    for name in sorted(set().union(*(closure(m) for m in modules))):
        source = module_path(name).read_text(encoding="utf-8")
        dists |= distributions(imported_top_levels(source)) | declared_tools(source)
    return tuple(sorted(dists, key=str.lower))


def stage_versions(*modules: str) -> dict[str, str]:
    """{distribution: version} for what the stage modules run (a rule's `tools` param)."""
    return {dist: version(dist) for dist in stage_packages(*modules)}


def model_packages(file: str | None = None, import_path: str | None = None) -> tuple[str, ...]:
    """The distributions a model's own code comes from: what a model file imports, or the
    package of an `import:` model's module (a missing file gives none: the config check says why)."""
    if import_path is not None:
        top_levels = {import_path.partition(":")[0].split(".")[0]}
    elif file is not None and Path(file).is_file():
        try:
            top_levels = imported_top_levels(Path(file).read_text(encoding="utf-8"))
        except SyntaxError:  # the export stage reports a broken model file, with its line
            top_levels = set()
    else:
        top_levels = set()
    return tuple(sorted(distributions(top_levels), key=str.lower))


def model_versions(file: str | None = None, import_path: str | None = None) -> dict[str, str]:
    return {dist: version(dist) for dist in model_packages(file, import_path)}
