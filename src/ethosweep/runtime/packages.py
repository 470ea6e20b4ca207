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
- a model's own code (`model_packages`): a model file's imports and those of the modules beside
  it that it imports (`local_modules`, which are also inputs of its jobs), or the package an
  `import:` model comes from (torchvision's mobilenet_v2 changes with torchvision).

Each set is closed over the installed distributions' own requirements (their metadata): Vela
runs numpy and flatbuffers, and upgrading those can change what it computes.

Looked up once per Snakemake process (parse time) and remembered between processes while the
installed distributions and ethosweep's sources stay the same (`_remembered`: reading the metadata
was a quarter of every run's and dry run's start); torch-free.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Callable

from packaging.requirements import Requirement

from ethosweep.runtime.codeversion import PACKAGE, PACKAGE_DIR, closure, module_path, own_model_modules
from ethosweep.runtime.io import atomic_write_text

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
            names = ast.literal_eval(node.value)
            return set(names) if isinstance(names, (tuple, list)) else set()  # not packages.py's own name
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


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=None)
def _installed_name(dist: str) -> str | None:
    """The installed distribution's own spelling of its name, or None if it is not installed."""
    try:
        return metadata.metadata(dist)["Name"]
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _requirements(dist: str) -> tuple[str, ...]:
    """The installed distributions `dist` requires (its own requirements, no extras: what an
    extra pulls in is named by the stage that runs it, as ALSO_RUNS)."""
    found = []
    for line in metadata.requires(dist) or ():
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = _installed_name(requirement.name)
        if name is not None:
            found.append(name)
    return tuple(found)


@lru_cache(maxsize=None)
def extra_providing(module: str) -> str | None:
    """The optional extra of ethosweep (pyproject's `optional-dependencies`) whose packages include the
    top-level `module` (`timm` -> 'zoos'), read from ethosweep's installed metadata; None if none."""
    for line in metadata.requires(PACKAGE) or ():
        requirement = Requirement(line)
        marker = str(requirement.marker or "")
        if _canonical(requirement.name) == _canonical(module.split(".")[0]) and "extra ==" in marker:
            return marker.split("extra ==")[1].strip().strip("'\"")
    return None


def dependency_closure(dists: set[str]) -> set[str]:
    """`dists` and every installed distribution they require, transitively: what they run (a numpy
    or flatbuffers upgrade changes what Vela computes as surely as a Vela upgrade)."""
    seen: dict[str, str] = {}
    todo = [d for d in dists if _installed_name(d) is not None]
    while todo:
        dist = todo.pop()
        if _canonical(dist) in seen:
            continue
        seen[_canonical(dist)] = dist
        todo.extend(_requirements(dist))
    return set(seen.values()) | dists


@lru_cache(maxsize=None)
def stage_packages(*modules: str) -> tuple[str, ...]:
    """The distributions the stage modules run: their closures' imports and their ALSO_RUNS, and
    everything those require."""
    dists: set[str] = set()
    for name in sorted(set().union(*(closure(m) for m in modules))):
        dists |= _module_runs(name)
    return tuple(sorted(dependency_closure(dists), key=str.lower))


@lru_cache(maxsize=None)
def _module_runs(module: str) -> frozenset[str]:
    """One package module's imported distributions and ALSO_RUNS (read once per process: the
    stages' closures share most modules)."""
    source = module_path(module).read_text(encoding="utf-8")
    # an optional extra's package (timm, ultralytics) runs on a model's behalf and is in that model's
    # versions; counted here too, installing or removing the extra would rerun every model's chain
    imported = {name for name in imported_top_levels(source) if extra_providing(name) is None}
    return frozenset(distributions(imported) | declared_tools(source))


def stage_versions(*modules: str) -> dict[str, str]:
    """{distribution: version} for what the stage modules run (a rule's `tools` param)."""
    return _remembered().get(",".join(modules), lambda: {dist: version(dist) for dist in stage_packages(*modules)})


# ---- remembered between processes ---------------------------------------------------------------
# Every Snakemake process (a run, a dry run, each cluster job) parses the rules, and the rules ask
# for ~20 stages' and every model's versions: reading the stage closures and the distributions'
# metadata took ~0.7 s of a 2.7 s dry run of the default matrix. Given the modules a stage or a
# model imports (a model's are read again each time: a few milliseconds), the answers depend only
# on the installed distributions and on ethosweep's sources, so they are kept in a file named by
# both, and read back while neither changed: installing, upgrading or removing a distribution adds,
# renames or removes a `<name>-<version>.dist-info` folder on the import path (a reinstall of the
# same version makes a new one), and an edit of a package module changes its modification time or
# size.

CACHE_ENV = "ETHOSWEEP_CACHE_DIR"


def environment_key() -> str:
    """A digest of what stage_versions' and model_versions' answers depend on: the installed
    distributions (distributions_key) and every source file of the package (modification time and
    size). Stats only: ~2 ms."""
    parts = [distributions_key()]
    for source in sorted(PACKAGE_DIR.rglob("*.py")):
        stat = source.stat()
        parts.append(f"{source}:{stat.st_mtime_ns}:{stat.st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def distributions_key() -> str:
    """A digest of the Python environment: the interpreter and every distribution's metadata folder
    on the import path (name, version and when it was made: an upgrade, a downgrade, a reinstall or
    a removal changes it). What the warm worker is keyed by (ethosweep.runtime.worker)."""
    parts = [sys.executable, sys.version]
    for entry in dict.fromkeys(os.path.abspath(p or ".") for p in sys.path):
        with contextlib.suppress(OSError):
            with os.scandir(entry) as listing:
                found = [e for e in listing if e.name.endswith((".dist-info", ".egg-info"))]
            parts.extend(f"{e.path}:{e.stat().st_mtime_ns}" for e in sorted(found, key=lambda e: e.name))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class _Remembered:
    """The answers of one environment, in `<cache>/stage-versions-<key>.json` (written atomically:
    concurrent Snakemake processes each write a complete file or none)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.answers: dict[str, dict[str, str]] = {}
        if path is not None:
            with contextlib.suppress(OSError, ValueError):
                self.answers = json.loads(path.read_text())

    def get(self, question: str, look_up: Callable[[], dict[str, str]]) -> dict[str, str]:
        """The remembered answer to `question`, else `look_up()`'s, remembered."""
        if question not in self.answers:
            self.answers[question] = look_up()
            self.save()
        return dict(self.answers[question])

    def save(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):  # an unwritable cache only costs the lookup again
            _forget_all_but_recent(self.path.parent, KEPT_ENVIRONMENTS - 1)
            # not write_json, which sorts keys: the answers keep their order (a param is compared as written)
            atomic_write_text(self.path, json.dumps(self.answers))


# Other environments' answers are kept for when they come back (a second checkout, uv's `--with`),
# up to this many files of a few KB each; each edit of ethosweep's code makes another.
KEPT_ENVIRONMENTS = 16


def _forget_all_but_recent(directory: Path, keep: int) -> None:
    files = sorted(directory.glob("stage-versions-*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
    for stale in files[keep:]:
        stale.unlink(missing_ok=True)


def cache_dir() -> Path | None:
    """$ETHOSWEEP_CACHE_DIR, else $XDG_CACHE_HOME/ethosweep or ~/.cache/ethosweep (None if there is
    no home to put it in)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "ethosweep"
    with contextlib.suppress(RuntimeError):
        return Path.home() / ".cache" / "ethosweep"
    return None


@lru_cache(maxsize=1)
def _remembered() -> _Remembered:
    directory = cache_dir()
    return _Remembered(directory / f"stage-versions-{environment_key()}.json" if directory else None)


def _imports_of(file: Path) -> set[str]:
    """The top-level names a Python file imports (none for a file that does not parse: the export
    stage reports a broken model file, with its line)."""
    try:
        dotted = _dotted_imports(file.read_text(encoding="utf-8"))  # one parse: the top levels follow
        return dotted | {name.split(".")[0] for name in dotted}
    except (SyntaxError, OSError, UnicodeDecodeError):
        return set()


def _dotted_imports(source: str) -> set[str]:
    """Absolute imports in full ('helpers.blocks'), to find a model's modules beside it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@lru_cache(maxsize=None)
def local_modules(file: str) -> tuple[str, ...]:
    """The modules beside a model file that it imports, transitively (`from blocks import Mixer`
    finds blocks.py next to it, as Python does for a script): its code as much as the file is.
    Paths as the file's own are written (relative stays relative)."""
    root = Path(file).parent
    found: dict[str, None] = {}
    todo = [Path(file)]
    while todo:
        for name in sorted(_imports_of(todo.pop())):
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                base = root.joinpath(*parts[:depth])
                for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                    if candidate.is_file() and str(candidate) not in found and candidate != Path(file):
                        found[str(candidate)] = None
                        todo.append(candidate)
    return tuple(found)


def model_packages(file: str | None = None, import_path: str | None = None) -> tuple[str, ...]:
    """The distributions a model's own code comes from: what a model file and the modules beside it
    import, or the package of an `import:` model's module (a missing file gives none: the config
    check says why), with everything they require."""
    return _packages_of(_model_top_levels(file, import_path))


def _model_top_levels(file: str | None, import_path: str | None) -> frozenset[str]:
    """The third-party top-level modules a model's own code imports (read, not imported: cheap)."""
    if import_path is not None:
        top_levels = {import_path.partition(":")[0].split(".")[0]}
        # a model built by ethosweep's own module (ethosweep.zoo.deployable): the packages it imports
        for module in own_model_modules(import_path):
            top_levels |= {name.split(".")[0] for name in _imports_of(module_path(module))}
    elif file is not None and Path(file).is_file():
        top_levels = set().union(*(_imports_of(Path(f)) for f in (file, *local_modules(file))))
        top_levels = {name.split(".")[0] for name in top_levels} - {name.split(".")[0] for name in _local_names(file)}
    else:
        top_levels = set()
    return frozenset(top_levels - set(sys.stdlib_module_names) - {PACKAGE})


def _packages_of(top_levels: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(dependency_closure(distributions(set(top_levels))), key=str.lower))


def _local_names(file: str) -> set[str]:
    """The top-level names the model's own modules beside it take."""
    root = Path(file).parent
    return {Path(m).relative_to(root).parts[0].removesuffix(".py") for m in local_modules(file)}


def model_versions(file: str | None = None, import_path: str | None = None) -> dict[str, str]:
    """{distribution: version} for a model's own code (the export and training rules' `tools`).
    Remembered by the modules the code imports, which are read again every time: an edited model
    file that imports something else is looked up again."""
    top_levels = _model_top_levels(file, import_path)
    return _remembered().get(
        "model imports " + ",".join(sorted(top_levels)),
        lambda: {dist: version(dist) for dist in _packages_of(top_levels)},
    )
