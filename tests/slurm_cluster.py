"""A real single-node SLURM cluster on localhost, configured and started by the tests.

Debian's `slurm-wlm` and `munge` packages provide the daemons; everything else (the munge
key, slurm.conf, state, spool and logs) lives in a temporary directory, so nothing on the
machine is touched and every run starts from an empty queue. Job completions are logged
to a text file (jobcomp/filetxt), which `sacct` reads without a database.

Run it by hand with `uv run python tests/slurm_cluster.py DIR` (as root; Ctrl-C stops it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
# Where Debian's SLURM commands look for their configuration. The SLURM executor plugin
# strips SLURM_* variables (SLURM_CONF too) before the `srun` inside each job, so the
# job steps only find the test cluster through this default path: the cluster links
# it to its own slurm.conf while it runs, and only if the machine has no SLURM of its own.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def unavailable_reason() -> str | None:
    """Why a test cluster cannot run here, or None."""
    missing = missing_daemons()
    if missing:
        return f"{', '.join(missing)} not installed: `apt-get install slurm-wlm munge` (Debian) to run the SLURM tests"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs: run the SLURM tests as root (CI does)"
    if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
        return f"{SYSTEM_CONF} exists: this machine has a SLURM of its own, which the test will not touch"
    return None


def _sbin(name: str) -> str | None:
    """Where a SLURM/munge program is (the daemons live in sbin, which is not always on PATH)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def missing_daemons() -> list[str]:
    """The SLURM/munge programs that are not installed."""
    return [name for name in (*DAEMONS, "sbatch", "sacct") if _sbin(name) is None]


SLURM_CONF = """\
ClusterName=ethosweep-test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser={user}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=600
ReturnToService=2
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    processes: list[subprocess.Popen]

    def completed_jobs(self) -> list[dict[str, str]]:
        """Job completion records (jobcomp/filetxt: one `Key=Value ...` line per job)."""
        path = self.root / "jobcomp.txt"
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            records.append(fields)
        return records

    def stop(self) -> None:
        if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == (self.root / "slurm.conf"):
            SYSTEM_CONF.unlink()
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until(predicate, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(logs.glob("*")) if p.is_file())
    raise RuntimeError(f"SLURM test cluster: {what} did not happen within {timeout:.0f} s\n{tails}")


def _usable_memory_mb() -> int:
    """80 % of the machine's memory: slurmd drains a node that has less than slurm.conf says."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.8)
    return 4000


def start_cluster(root: Path, cpus: int | None = None, mem_mb: int | None = None) -> Cluster:
    """Start munged, slurmctld and slurmd (foreground processes we own) under `root`."""
    root = root.resolve()
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            host=host,
            root=root,
            user=os.environ.get("USER") or "root",
            cpus=cpus or os.cpu_count(),
            mem_mb=mem_mb or _usable_memory_mb(),
            ctld_port=_free_port(),
            d_port=_free_port(),
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.symlink_to(conf)
    logs = root / "log"
    processes = []

    def spawn(*command: str, log: str) -> None:
        out = open(logs / log, "wb")
        processes.append(
            subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        )

    cluster = Cluster(root=root, env=env, processes=processes)
    spawn(
        _sbin("munged"),
        "--foreground",
        "--force",
        f"--socket={root}/munge/munge.sock",
        f"--key-file={key}",
        f"--pid-file={root}/munge/munged.pid",
        f"--log-file={root}/munge/munged.log",
        f"--seed-file={root}/munge/munged.seed",
        log="munged.out",
    )

    def node_idle() -> bool:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
        return proc.returncode == 0 and proc.stdout.strip() == "idle"

    try:
        _wait_until(lambda: (root / "munge" / "munge.sock").exists(), 20, "munged start", logs)
        spawn(_sbin("slurmctld"), "-D", "-i", log="slurmctld.out")
        spawn(_sbin("slurmd"), "-D", log="slurmd.out")
        _wait_until(node_idle, 60, "the node becoming idle", logs)
    except BaseException:
        cluster.stop()
        raise
    return cluster


if __name__ == "__main__":
    if reason := unavailable_reason():
        sys.exit(reason)
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "slurm-cluster")
    started = start_cluster(target)
    print(f"export SLURM_CONF={started.env['SLURM_CONF']}   # Ctrl-C stops the cluster")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        started.stop()
