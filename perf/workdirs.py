"""What every benchmark does to drive the workflow: a working directory with a config, a
`snakemake` run in it (this checkout's workflow, or another checkout's), a timed step, the page
cache warmed for whichever side runs first."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def make_workdir(path: Path, config: dict) -> Path:
    """An empty working directory with the repo's models and `config` as its config."""
    shutil.rmtree(path, ignore_errors=True)
    (path / "config").mkdir(parents=True)
    shutil.copytree(REPO / "models", path / "models")
    write_config(path, config)
    return path


def write_config(path: Path, config: dict) -> None:
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def snakemake_command(workdir: Path, cores: int, *extra: str, source: Path = REPO, via_uv: bool = False) -> list[str]:
    """`snakemake --cores N` in `workdir` with the workflow of `source`; `via_uv`: as the docs run
    it (`uv run` checks the environment first)."""
    launcher = ["uv", "run", "--project", str(REPO), "snakemake"] if via_uv else [sys.executable, "-m", "snakemake"]
    return [
        *launcher,
        "--snakefile",
        str(source / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        str(cores),
        *extra,
    ]


def snakemake(workdir: Path, cores: int, source: Path = REPO, via_uv: bool = False, cold: bool = False) -> None:
    """The whole workflow (`all`), quietly, with `source`'s library first on the path; a failed run
    ends the benchmark with the end of its log. `cold`: no warm worker left by an earlier run (a
    worker outlives its run by its idle timeout): a cold run pays for starting one."""
    env = {**os.environ, "PYTHONPATH": str(source / "src")}
    command = snakemake_command(workdir, cores, "--quiet", "all", source=source, via_uv=via_uv)
    with own_workers(cold, source) as workers:
        proc = run_snakemake(command, env={**env, **workers})
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed in {workdir}:\n{proc.stderr[-4000:]}")


# With ETHOSWEEP_BENCHMARK_WORKERS=shared (the tests' small modes, tests/test_benchmarks.py) a "cold"
# run uses the machine's warm worker like any other run: a test session then imports torch and
# ExecuTorch in one worker, not again for each cold run (~9 CPU-seconds each on a 2-core machine, a
# dozen cold runs); and the store ETHOSWEEP_CACHE names, if one is set (the test session's). Such a
# run's time is not a cold run's, and the benchmark says so.
SHARED_WORKERS = "ETHOSWEEP_BENCHMARK_WORKERS"
_told = []


@contextlib.contextmanager
def own_workers(cold: bool = True, source: Path = REPO):
    """The environment of a cold run: warm workers of its own (ethosweep.runtime.worker), in a new
    socket folder where no earlier run left one, stopped when it is done. Never another run's
    worker: a sweep running beside the benchmark keeps its own. `cold` False: the user's folder.
    Another checkout's code (`source`) always gets workers of its own: none is shared with it."""
    shared = cold and source == REPO and os.environ.get(SHARED_WORKERS) == "shared"
    if shared and not _told:
        _told.append(True)
        store = f" and the store {os.environ['ETHOSWEEP_CACHE']}" if os.environ.get("ETHOSWEEP_CACHE") else ""
        print(f"  (cold runs use the machine's warm worker{store}: {SHARED_WORKERS}=shared; their times are not cold)")
    if not cold or shared:
        yield {}
        return
    from ethosweep.runtime import worker

    folder = Path(tempfile.mkdtemp(prefix="esw-bench-", dir="/tmp"))  # short: socket paths are limited
    try:
        yield {worker.WORKER_DIR: str(folder)}
    finally:
        worker.shutdown_all(folder)
        time.sleep(0.5)  # let each release its lock
        shutil.rmtree(folder, ignore_errors=True)


def run_snakemake(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True); with SHARED_WORKERS (the tests), a
    `python -m snakemake` command forked from the test session's process that imported Snakemake
    (tests/preloaded.py): most of a small run's start is Snakemake's imports, and its time is not
    measured there."""
    env = dict(os.environ if env is None else env)
    if os.environ.get(SHARED_WORKERS) != "shared" or command[:3] != [sys.executable, "-m", "snakemake"]:
        return subprocess.run(command, env=env, capture_output=True, text=True)
    return preloaded().run(command, env)


def preloaded():
    """tests/preloaded.py, the test session's servers of preloaded modules (SHARED_WORKERS only)."""
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    import preloaded as module

    return module


def run_all(commands: list[list[str]], cores: int) -> None:
    """Each command, `cores` at a time, quietly; the first failure ends the benchmark."""

    def run(command):
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    with concurrent.futures.ThreadPoolExecutor(max_workers=cores) as pool:
        list(pool.map(run, commands))


def planned(workdir: Path, cores: int) -> dict[str, int]:
    """The jobs a dry run plans, by rule (its "Job stats" table; {} for nothing to do)."""
    proc = run_snakemake(snakemake_command(workdir, cores, "--dry-run"))
    proc.check_returncode()
    text = proc.stdout + proc.stderr
    if "Job stats:" not in text:
        return {}
    table = text.split("Job stats:")[1].splitlines()[3:]
    rows = [re.match(r"^(\w+)\s+(\d+)$", line.strip()) for line in table]
    return {m.group(1): int(m.group(2)) for m in itertools.takewhile(bool, rows) if m.group(1) != "total"}


def timed(name: str, func, width: int = 58) -> float:
    """Run `func`, print its wall time beside `name`, return it."""
    started = time.perf_counter()
    func()
    seconds = time.perf_counter() - started
    print(f"  {name:<{width}} {seconds:8.1f} s", flush=True)
    return seconds


def warm_page_cache() -> None:
    """Read the code and libraries of what both sides import, once, untimed: whichever side runs
    first would otherwise read torch and ExecuTorch from disk for the other. Read, not imported:
    importing them costs ~6 CPU-seconds, reading them from the page cache about one. Not with
    shared workers (the tests): the times are not compared, and the test session keeps them read."""
    if os.environ.get(SHARED_WORKERS) == "shared":
        return
    for package in ("torch", "executorch", "snakemake"):
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            for path in Path(folder).rglob("*"):
                if (path.suffix in (".py", ".pyc") or ".so" in path.suffixes) and path.is_file():
                    with open(path, "rb") as f:
                        while f.read(1 << 20):
                            pass
