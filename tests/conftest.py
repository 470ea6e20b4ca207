"""Shared fixtures: a real tiny sweep, run once per test session with Snakemake."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import preloaded

REPO = Path(__file__).resolve().parents[1]

# One torch thread per test process, as every stage job has (`threads: 1`): the pytest-xdist workers
# already fill the cores, and a second OpenMP thread would spin at each barrier waiting for a core
# another worker holds (docs/how-it-works.md, "The tests"). Read when torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The tiny matrix the workflow tests run for real: the workflow's test config (.test/, the
# Snakemake Workflow Catalog's convention), with its data files and the repository's models.
TEST_DIR = REPO / ".test"
# What a user reads: the README, the config's keys and the docs (the tests that name a sentence or
# a command a user is told to type read them here).
DOCS = {
    path.relative_to(REPO).as_posix(): path.read_text()
    for path in [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
}
TINY_CONFIG = yaml.safe_load((TEST_DIR / "config" / "config.yaml").read_text())

U55_CELL = "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"


# What makes a working directory look like a checkout to the commands a user types there
# (`snakemake` finds the Snakefile and its profile); linked, so the repository's code runs.
CHECKOUT_LINKS = ("Snakefile", "workflow", "profiles", "boards", "src")


def make_workdir(path: Path, config: dict) -> Path:
    """A working directory with the given config and the repository's model files."""
    (path / "config").mkdir(parents=True, exist_ok=True)
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(REPO / "models", path / "models", dirs_exist_ok=True)
    shutil.copytree(TEST_DIR / "data", path / "data", dirs_exist_ok=True)
    for name in CHECKOUT_LINKS:
        if not (path / name).is_symlink():
            (path / name).symlink_to(REPO / name)
    return path


def typed(command: str, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    """`command` exactly as a user types it (README, a message) in `cwd`, a working directory
    from make_workdir. UV_PROJECT points `uv run` at this repository's environment, as it
    finds it by itself in a checkout."""
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "UV_PROJECT": str(REPO)},
    )


def snakemake_command(workdir: Path, *args: str, cores: int = 2) -> list[str]:
    """The command line that runs the repository's workflow in `workdir` (default profile included)."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        str(cores),
        *args,
    ]


def snakemake(
    workdir: Path, *args: str, env: dict | None = None, check: bool = True, fresh: bool = False
) -> subprocess.CompletedProcess:
    """Run the repository's workflow in `workdir`, as a user would (default profile included); from
    a process that imported Snakemake once (tests/preloaded.py), or `fresh`, a new interpreter: its
    runs share that process's hash seed, a run compared with another for determinism must not."""
    command, env = snakemake_command(workdir, *args), {**os.environ, **(env or {})}
    proc = subprocess.run(command, capture_output=True, text=True, env=env) if fresh else preloaded.run(command, env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc


def append(path: Path, text: str) -> None:
    """Edit a file as a user would: `text` added at its end."""
    with open(path, "a") as f:
        f.write(text)


def planned_jobs(workdir: Path, env: dict | None = None) -> dict[str, int]:
    """Jobs a dry run would execute, by rule ({} when there is nothing to do)."""
    proc = snakemake(workdir, "--dry-run", env=env)
    return job_stats(proc.stdout + proc.stderr)


def job_stats(text: str) -> dict[str, int]:
    """The jobs by rule in what a Snakemake dry run printed ({} when there is nothing to do)."""
    if "Nothing to be done" in text:
        return {}
    stats = text.split("Job stats:")[1]
    jobs = {}
    for line in stats.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


# The jobs that end every run that changed anything: the summary, the operator map and the report.
END_OF_RUN = {
    "summarize_sweep": 1,
    "map_operators": 1,  # reads the lowerings and Vela's MACs
    "report_cells": 1,
    "report_plots": 1,
    "report_index": 1,
    "all": 1,
}


def model_chain(exports: int, profiles: int, cells: int) -> dict[str, int]:
    """The jobs a change to a model plans from its export on: `exports` exports, `profiles` (model,
    scheme, TOSA profile) quantizations, lowerings, verifications and fallback checks, `cells` Vela
    jobs (the .pte and its header)."""
    chain = {"quantize_model": 1, "lower_to_tosa": 1, "verify_numerics": 1, "verify_fallbacks": 1}
    return {"export_model": exports, **{job: profiles for job in chain}, "compile_with_vela": cells}


def session_root(tmp_path_factory, worker_id) -> Path:
    """The folder the pytest-xdist workers of one session share: their own temp folders are its children."""
    return tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session", autouse=True)
def preloaded_servers(tmp_path_factory, worker_id) -> None:
    """The test session's servers of preloaded modules (tests/preloaded.py) in a folder of its own,
    shared by its pytest-xdist workers and the benchmarks' scripts they start."""
    os.environ[preloaded.FOLDER_VARIABLE] = str(session_root(tmp_path_factory, worker_id) / "preloaded")


@pytest.fixture(scope="session")
def session_store(tmp_path_factory, worker_id) -> dict[str, str]:
    """The environment of a run with the test session's store (ETHOSWEEP_CACHE, docs/cache.md): for
    a run that computes again what another run of the session computed (the tiny sweep's models,
    MNIST alone) and whose test is about something else (an interrupt, the end of a run, a failed
    cell), so a model is lowered once per session rather than once per test. Not for a test of the
    stages' own results or of faults injected into them: the store would answer for them."""
    return {"ETHOSWEEP_CACHE": str(session_root(tmp_path_factory, worker_id) / "store")}


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, worker_id, session_store) -> Path:
    """A completed sweep of TINY_CONFIG, run once per test session however many pytest-xdist
    workers share it: the first to ask runs it, the others wait on its lock. Tests copy it before
    changing anything. It fills the session's store (no other run there has its models' settings,
    so it computes every stage itself)."""
    root = session_root(tmp_path_factory, worker_id)
    workdir, done = root / "tiny-sweep", root / "tiny-sweep.done"
    with open(root / "tiny-sweep.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            snakemake(make_workdir(workdir, TINY_CONFIG), env=session_store)
            done.touch()
    return workdir


# tryfirst: pytest-xdist turns a test's xdist_group mark into its group in its own hook, so the mark
# must be on the test before that hook runs (after it, the group was silently ignored)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The slow tests first (workers take tests in this order, and one started last would end the
    session alone). A test that uses a module's fixture runs on the worker that made it: such
    fixtures (a sweep, a SLURM cluster) are made once per worker, so their tests are kept together."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        scopes = definitions.name2fixturedefs.values() if definitions else []
        if any(defs[-1].scope == "module" for defs in scopes):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture
def sweep_copy(tiny_sweep, tmp_path) -> Path:
    """A private copy of the completed tiny sweep (outputs, logs and Snakemake's metadata)."""
    copy = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, copy, symlinks=True)
    return copy
