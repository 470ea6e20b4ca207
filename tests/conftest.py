"""Shared fixtures: a real tiny sweep, run once per test session with Snakemake."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# The tiny matrix the workflow tests run for real: the seed MNIST model and the
# two-input `add` on one U55 and one U85 target, plus DS-CNN on U55, which
# Ethos-U55 can only partly delegate (its 24x5 average pool stays on the CPU), and
# the MNIST CNN trained on digits on U55 (numerics on real data), with BundleIO.
TINY_CONFIG = {
    "models": [
        # `reads`: a file the model's code reads (as a model file loading its weights would)
        {"name": "mnist", "file": "models/mnist.py", "reads": ["tests/data/mnist_reads.txt"]},
        {
            "name": "add",
            "import": "executorch.examples.models.toy_model:AddModule",
            "inputs": [{"shape": [1]}, {"shape": [1]}],
        },
        {
            "name": "ds_cnn",
            "import": "executorch.examples.models.mlperf_tiny:DSCNNKWS",
            "inputs": [{"shape": [1, 1, 49, 10], "range": [-1, 1]}],
        },
        {"name": "mnist_digits", "file": "models/mnist.py", "dataset": "digits", "train": {"epochs": 12}},
    ],
    "targets": ["ethos-u55-128", "ethos-u85-256"],
    "memory_modes": ["Shared_Sram"],
    "exclude": [{"model": "ds_cnn"}, {"model": "mnist_digits"}],
    "include": [
        {"model": "ds_cnn", "target": "ethos-u55-128", "memory_mode": "Shared_Sram"},
        {"model": "mnist_digits", "target": "ethos-u55-128", "memory_mode": "Shared_Sram"},
    ],
    "numerics": {"evaluation_samples": 300, "bundleio": True},
    # Both boards use the U55 cells above (no new compilation): a fit check on the
    # Alif E8's memories, and on a test board too small for MNIST.
    "boards": ["alif-e8", "tiny-board"],
    "board_files": ["tests/data/tiny_board.yaml"],
    # CPU-only cells (Cortex-M backend, no NPU) for every model; no SDK here: no firmware
    "cpu_targets": ["cortex-m55"],
}

U55_CELL = "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"


# What makes a working directory look like a checkout to the commands a user types there
# (`snakemake` finds the Snakefile and its profile); linked, so the repository's code runs.
CHECKOUT_LINKS = ("Snakefile", "workflow", "profiles", "boards", "src")


def make_workdir(path: Path, config: dict) -> Path:
    """A working directory with the given config and the repository's model files."""
    (path / "config").mkdir(parents=True, exist_ok=True)
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(REPO / "models", path / "models", dirs_exist_ok=True)
    (path / "tests" / "data").mkdir(parents=True, exist_ok=True)
    for name in ("tiny_board.yaml", "mnist_reads.txt"):
        shutil.copy(REPO / "tests" / "data" / name, path / "tests" / "data")
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


def snakemake(workdir: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the repository's workflow in `workdir`, as a user would (default profile included)."""
    command = snakemake_command(workdir, *args)
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc


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


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> Path:
    """A completed sweep of TINY_CONFIG. Tests copy it before changing anything."""
    workdir = make_workdir(tmp_path_factory.mktemp("tiny-sweep"), TINY_CONFIG)
    snakemake(workdir)
    return workdir


@pytest.fixture
def sweep_copy(tiny_sweep, tmp_path) -> Path:
    """A private copy of the completed tiny sweep (outputs, logs and Snakemake's metadata)."""
    copy = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, copy, symlinks=True)
    return copy
