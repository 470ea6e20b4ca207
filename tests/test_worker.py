"""The warm worker: jobs run in fresh forks, crashes stay contained, it shuts down cleanly."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ethosweep.runtime import worker


@pytest.fixture
def server(monkeypatch):
    """A light worker (preloading only `json`) on a private socket."""
    runtime = Path(tempfile.mkdtemp(prefix="esw", dir="/tmp"))  # short: Unix socket paths are limited
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("ETHOSWEEP_WORKER_PRELOAD", "json")
    yield worker.socket_path()
    worker.shutdown()
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A module of job functions the worker's children import from the client's sys.path."""
    (tmp_path / "probe_jobs.py").write_text(
        textwrap.dedent("""
        import os, time
        def write(path, text):
            print("writing", path)
            with open(path, "w") as f:
                f.write(f"{text} pid={os.getpid()} cwd={os.getcwd()} env={os.environ.get('PROBE')}")
        def crash():
            os.kill(os.getpid(), 9)
        def segfault():
            import ctypes
            ctypes.string_at(0)
        def slow(path):
            time.sleep(30)
            open(path, "w").write("finished")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def request(jobs: Path, function: str, **kwargs) -> dict:
    return {
        "steps": [{"ref": f"probe_jobs:{function}", "kwargs": kwargs}],
        "log": str(jobs / f"{function}.log"),
        "label": function,
        "rule": function,
        "threads": 1,
        "cwd": str(jobs),
        "env": {**os.environ, "PROBE": "client-env"},
        "sys_path": [str(jobs), *sys.path],
    }


def test_a_job_runs_in_a_child_with_the_clients_context(server, jobs):
    out = jobs / "out.txt"
    assert worker.submit(request(jobs, "write", path="out.txt", text="hello")) == {
        "ok": True,
        "reason": "",
        "fault": None,
        "recorded": False,
        "reproducer": None,
        "details": {},
    }
    text = out.read_text()
    assert text.startswith("hello") and f"cwd={jobs}" in text and "env=client-env" in text
    assert f"pid={os.getpid()}" not in text
    assert "writing out.txt" in (jobs / "write.log").read_text()  # the job's output is in its log


def test_library_edits_are_seen_by_the_next_job(server, jobs):
    worker.submit(request(jobs, "write", path="a.txt", text="before"))
    source = jobs / "probe_jobs.py"
    source.write_text(source.read_text().replace('f"{text} pid', 'f"EDITED {text} pid'))
    worker.submit(request(jobs, "write", path="b.txt", text="after"))
    assert (jobs / "b.txt").read_text().startswith("EDITED after")


def test_a_crashing_job_fails_alone_and_the_worker_keeps_serving(server, jobs):
    outcome = worker.submit(request(jobs, "crash"))
    assert not outcome["ok"] and outcome["reason"].startswith("the job was killed (SIGKILL), most likely for memory")
    assert "--set-resources crash:mem_mb=<MB>" in outcome["reason"]
    outcome = worker.submit(request(jobs, "segfault"))
    # the job's own process died, and again in a fresh process: the job's own outcome, recorded
    # (ethosweep.runtime.errors: a crash is kept once it happened twice)
    assert outcome == {
        "ok": False,
        "reason": "the job crashed (SIGSEGV) (again in a fresh process)",
        "fault": "CRASH",
        "recorded": True,
        "reproducer": None,
        "details": {},
    }
    log = (jobs / "segfault.log").read_text()
    assert "the job crashed (SIGSEGV); running the stage once more in a fresh process" in log
    assert "ethosweep-failure: the job crashed (SIGSEGV) (again in a fresh process)" in log
    assert worker.submit(request(jobs, "write", path="after.txt", text="still serving"))["ok"]


def test_a_job_whose_client_goes_away_is_stopped(server, jobs):
    worker.submit(request(jobs, "write", path="warmup.txt", text="x"))  # server up
    client = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ("import json, sys; from ethosweep.runtime import worker; worker.submit(json.loads(sys.argv[1]))"),
            __import__("json").dumps(request(jobs, "slow", path="slow.txt")),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    time.sleep(2)
    client.send_signal(signal.SIGKILL)
    client.wait()
    time.sleep(1)
    assert not (jobs / "slow.txt").exists()
    servers = subprocess.run(["pgrep", "-f", str(server)], capture_output=True, text=True).stdout.split()
    assert len(servers) == 1  # the server lives on; the job's child is gone: exited (a zombie until
    # the server's accept loop next reaps it, which it does between connections) or reaped
    states = subprocess.run(["ps", "-o", "stat=", "--ppid", servers[0]], capture_output=True, text=True).stdout
    assert [s for s in states.split() if not s.startswith("Z")] == []


def test_shutdown_and_idle_timeout(server, jobs, monkeypatch):
    worker.submit(request(jobs, "write", path="x.txt", text="x"))
    assert server.exists()
    assert worker.shutdown() is True
    time.sleep(1.5)
    assert not server.exists() and worker.shutdown() is False

    idle = subprocess.Popen([sys.executable, "-m", "ethosweep.runtime.worker", str(server), "1"])
    assert idle.wait(timeout=20) == 0  # exits by itself after 1 s without jobs
    assert not server.exists()


def test_shutdown_all_stops_every_server_of_a_folder(server, jobs):
    """What a benchmark calls on the folder its cold runs used: a server outlives the run that started it."""
    worker.submit(request(jobs, "write", path="x.txt", text="x"))
    other = server.with_name("worker-0123456789abcdef.sock")  # another environment's server
    started = subprocess.Popen([sys.executable, "-m", "ethosweep.runtime.worker", str(other)])
    deadline = time.monotonic() + 20
    while not other.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.shutdown_all() == 2
    assert started.wait(timeout=20) == 0
    time.sleep(1.5)
    assert not server.exists() and not other.exists() and worker.shutdown_all() == 0


def test_a_cluster_jobs_steps_share_the_server_its_snakemake_started_which_ends_with_it(server, jobs, monkeypatch):
    """A SLURM group job's Snakemake (its batch step) runs each cell in a job step of its own: it
    starts one server for them, keyed by the job and bound to itself, so the steps import torch once
    and nothing outlives the job, with or without a cgroup to kill it. A job step starts none."""
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    starter = (
        "from ethosweep.runtime import worker; import time; "
        "jobs = [f'compile_with_vela:cell={{i}}' for i in range({})]; "
        "worker.serve_cluster_job(['snakemake', '--target-jobs', *jobs, '--mode', 'remote']); time.sleep(60)"
    )
    # the job's Snakemake (SLURM_STEP_ID unset); one job alone: nothing to share, no server
    alone = subprocess.Popen(
        [sys.executable, "-c", starter.format(1)], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    group = subprocess.Popen(
        [sys.executable, "-c", starter.format(8)], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    job_socket = worker.socket_path()
    assert job_socket.name == f"worker-{worker.fingerprint()}-slurm41.sock"
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # now a job step of that job
    deadline = time.monotonic() + 15
    while not worker.enabled() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.enabled()
    assert worker.submit(request(jobs, "write", path="a.txt", text="a"))["ok"]
    assert worker.submit(request(jobs, "write", path="b.txt", text="b"))["ok"]
    assert job_socket.exists() and not server.exists()  # the job's server, not the machine's
    # one server, the group's: counted by parent, as a job's fork may still be exiting after its reply
    assert [len(started_by(parent, job_socket)) for parent in (alone, group)] == [0, 1]
    log = Path(f"{job_socket}.log")
    assert log.read_text().count("worker: write in process") == 2
    group.kill()
    group.wait()
    deadline = time.monotonic() + 15
    while job_socket.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not job_socket.exists() and "its cluster job's Snakemake) ended, exiting" in log.read_text()
    alone.kill()
    alone.wait()
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # a job whose Snakemake started none: in-process
    assert not worker.enabled()


def started_by(parent: subprocess.Popen, socket_file: Path) -> list[str]:
    """The processes `parent` started whose command line names `socket_file` (its servers)."""
    found = subprocess.run(["pgrep", "-P", str(parent.pid), "-f", str(socket_file)], capture_output=True, text=True)
    return found.stdout.split()


def test_the_socket_is_keyed_by_the_environment(server):
    assert worker.fingerprint() in server.name
    assert oct(server.parent.stat().st_mode & 0o777) == "0o700"


def test_a_starting_server_removes_the_files_of_servers_long_gone(server, jobs):
    """Each environment, checkout and edit of the worker module has a server of its own: the files
    of one that exited long ago go when another starts; a running server's and a recent one's stay."""
    gone, recent = (server.with_name(f"worker-{key}.sock") for key in ("00000000000000aa", "00000000000000bb"))
    for socket_file in (gone, recent):
        for suffix in (".lock", ".spawn", ".log"):
            Path(f"{socket_file}{suffix}").write_text("worker: idle, exiting\n")
    long_ago = time.time() - 2 * worker.STALE_SECONDS
    for suffix in (".lock", ".spawn", ".log"):
        os.utime(f"{gone}{suffix}", (long_ago, long_ago))

    worker.submit(request(jobs, "write", path="x.txt", text="x"))  # starts this environment's server

    left = sorted(p.name for p in server.parent.iterdir())
    assert not any(name.startswith(gone.name) for name in left)
    assert [n for n in left if n.startswith(recent.name)] == [f"{recent.name}{s}" for s in (".lock", ".log", ".spawn")]
    assert f"{server.name}.lock" in left and server.name in left  # the running server's own
    # a running server's files stay however old: its lock is held
    for suffix in (".log", ".spawn", ".lock", ""):
        os.utime(f"{server}{suffix}", (long_ago, long_ago))
    assert worker.remove_exited_servers_files(server.parent, keep=gone) == 0
    assert server.exists()


def test_a_benchmark_stops_only_the_servers_it_started(server, jobs, monkeypatch):
    """A benchmark's cold runs get a socket folder of their own (perf/workdirs.py own_workers):
    stopping its servers leaves the worker of a sweep running beside it alone, and a busy server
    asked to stop only if idle keeps serving."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perf"))
    from workdirs import own_workers

    worker.submit(request(jobs, "write", path="x.txt", text="x"))  # the user's sweep's server
    with own_workers() as environment:
        folder = Path(environment[worker.WORKER_DIR])
        monkeypatch.setenv(worker.WORKER_DIR, str(folder))
        worker.submit(request(jobs, "write", path="y.txt", text="y"))  # the benchmark's own server
        assert [p.name for p in folder.glob("worker-*.sock")] == [server.name]
        monkeypatch.delenv(worker.WORKER_DIR)
    assert not folder.exists() and server.exists()  # the benchmark's stopped, the sweep's serving
    assert worker.submit(request(jobs, "write", path="z.txt", text="z"))["ok"]
    # a server running a job is not stopped by "if idle"
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json, sys; from ethosweep.runtime import worker; worker.submit(json.loads(sys.argv[1]))",
            __import__("json").dumps(request(jobs, "slow", path="slow.txt")),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    time.sleep(2)
    assert worker.shutdown(if_idle=True) is False and server.exists()
    busy.kill()
    busy.wait()


def test_the_worker_is_keyed_by_every_installed_distribution(tmp_path, monkeypatch):
    """After `uv sync` changes any distribution (a preloaded one such as scikit-learn included), the
    next run's jobs go to a new server, never forks of one that imported the old version."""
    from ethosweep.runtime import packages

    before = worker._look_up_fingerprint()
    site = tmp_path / "site"
    (site / "scikit_learn-9.9.9.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    assert packages.distributions_key() != "" and worker._look_up_fingerprint() != before
