"""The workflow on a real SLURM cluster (single node, started by the test) through
snakemake-executor-plugin-slurm (the `cluster` extra) and the repository's SLURM profile, against a
local run.

Needs Debian's slurm-wlm and munge and root (slurmd starts jobs as their user); `.ci/run`
installs the packages. Run it alone with `uv run pytest -m slurm`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from conftest import REPO, make_workdir, snakemake, snakemake_command
from slurm_cluster import start_cluster, unavailable_reason

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(bool(unavailable_reason()), reason=str(unavailable_reason())),
]

# One model on one target in two memory modes: its export, quantization, lowering and verification
# each a cluster job, and one grouped cluster job for its two cells' short chains (vela -> header).
# (A second model would add five jobs that each import torch and test nothing new.)
CONFIG = {
    "models": [{"name": "mnist", "file": "models/mnist.py"}],
    "targets": ["ethos-u55-128"],
    "memory_modes": ["Shared_Sram", "Sram_Only"],
}
CELLS = [f"mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/{mode}" for mode in ("Shared_Sram", "Sram_Only")]
# What a job computes; the same on any machine (Snakemake's logs and timings are not compared).
COMPARED = [
    f"results/{stage}/{cell}/{name}"
    for cell in CELLS
    for stage, name in (
        ("vela", "model.pte"),
        ("vela", "summary.json"),
        ("vela", "per_layer.csv"),
        ("header", "model_pte.h"),
    )
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory.mktemp("slurm"))
    yield started
    started.stop()


def locked_version(name: str) -> str:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    return next(package["version"] for package in lock["package"] if package["name"] == name)


@pytest.fixture(scope="module")
def cluster_extra(tmp_path_factory) -> dict[str, str]:
    """What `uv run --extra cluster` adds, at the versions uv.lock pins: the SLURM executor plugins,
    installed beside the project's environment (on PYTHONPATH, which sbatch passes on to the jobs)
    rather than into it, where the suite's other Snakemake starts would import them too."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cluster"]
    plugins = [f"{name}=={locked_version(name)}" for name in (Requirement(r).name for r in extra)]
    target = tmp_path_factory.mktemp("cluster-extra")
    install = [sys.executable, "-m", "uv", "pip", "install", "--target", str(target), "--no-deps", *plugins]
    subprocess.run([*install, "--python", sys.executable], check=True, capture_output=True)
    return {"PYTHONPATH": str(target)}


def slurm_run(workdir: Path, cluster, env: dict) -> subprocess.CompletedProcess:
    """The cluster command of docs/clusters.md (`env`: the cluster extra's), plus what this test
    cluster needs: it has 2 CPUs per node, no accounting database (so job states come from squeue),
    and fast polling."""
    command = snakemake_command(
        workdir,
        "--profile",
        str(REPO / "workflow/profiles/slurm"),
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "5",
        "--seconds-between-status-checks",
        "5",
        "--slurm-keep-successful-logs",
        cores=os.cpu_count(),
    )
    return subprocess.run(
        command, capture_output=True, text=True, env={**cluster.env, **env}, cwd=workdir, timeout=1800
    )


@pytest.mark.slow
def test_sweep_through_slurm_matches_local_run(tmp_path, cluster, cluster_extra):
    """With the store (ETHOSWEEP_CACHE) in the cluster's shared folder, as docs/clusters.md sets it:
    the cluster's jobs fill it, and a local run of the same config takes its stages from it."""
    store = {"ETHOSWEEP_CACHE": str(cluster.root / "shared" / "store")}
    on_slurm = make_workdir(tmp_path / "slurm", CONFIG)
    # the jobs' warm workers' sockets and logs (the node is this machine); short: a Unix socket's
    # path has at most 107 bytes, and pytest-xdist's tmp_path is longer
    servers = Path(tempfile.mkdtemp(prefix="esw", dir="/tmp"))
    proc = slurm_run(on_slurm, cluster, env={**store, **cluster_extra, "ETHOSWEEP_WORKER_DIR": str(servers)})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]

    # Every compute job went through SLURM and completed there, in this working directory.
    submitted = [int(job) for job in re.findall(r"submitted with SLURM jobid (\d+)", output)]
    records = {int(r["JobId"]): r for r in cluster.completed_jobs() if r.get("WorkDir") == str(on_slurm)}
    assert submitted and set(submitted) <= set(records), (submitted, sorted(records))
    assert {records[job]["JobState"] for job in submitted} == {"COMPLETED"}
    # export + quantize + lower + verify + the fallback check (5) and the grouped cell chains (1 job
    # for 2 cells); the firmware plan, which reads JSON only, runs on the login node
    assert len(submitted) == 6, output[-4000:]
    group_logs = list((on_slurm / ".snakemake/slurm_logs").glob("group_cell_*/*.log"))
    assert len(group_logs) == 1
    group_log = group_logs[0].read_text()
    assert "rule compile_with_vela:" in group_log  # the cells' Vela (and header) jobs, as one SLURM job
    # Its two cells' job steps ran side by side on the group's 2 CPUs (ethosweep.runtime.scheduling;
    # the plugin alone runs them one after the other): both steps' Snakemake had started its cell
    # before either finished, and neither step waited for the other's CPU or memory
    assert "Provided remote nodes: 2" in group_log
    steps = re.findall(r"^(localrule compile_with_vela|Finished jobid: 0 )", group_log, re.MULTILINE)
    assert steps[:2] == ["localrule compile_with_vela"] * 2, steps
    assert "step creation temporarily disabled" not in group_log
    # The group job's Snakemake started one warm worker for its two cells' job steps (torch imported
    # once for both), which ended with it; the jobs that run alone imported torch themselves.
    logs = [path.read_text() for path in servers.glob("worker-*-slurm*.sock.log")]
    assert len(logs) == 1 and logs[0].count("worker: compile_with_vela ") == 2, logs
    assert "its cluster job's Snakemake) ended, exiting" in logs[0]
    assert not subprocess.run(["pgrep", "-f", str(servers)], capture_output=True).stdout

    # The same config run locally takes the cluster's exports, quantizations, lowerings and
    # verifications from the store, and compiles the same bytes.
    local = make_workdir(tmp_path / "local", CONFIG)
    snakemake(local, env=store)
    for stage in ("export", "quantize", "lower", "verify"):
        logs = [p for p in (local / "logs" / stage).rglob("*.log") if ".fallbacks" not in p.name]
        assert len(logs) == 1 and all("ethosweep: taken from the cache: " in p.read_text() for p in logs), stage
    for relative in COMPARED:
        assert (on_slurm / relative).read_bytes() == (local / relative).read_bytes(), relative
    cycles = [line for line in (on_slurm / "results/summary.csv").read_text().splitlines() if "mnist" in line]
    assert cycles == [line for line in (local / "results/summary.csv").read_text().splitlines() if "mnist" in line]
