"""A warm fork server for the jobs that import torch and ExecuTorch (7-15 s a process, more than
most jobs' own work): each job stays a Snakemake job, but its thin client asks this server, which
imported the heavy third-party modules once, to run it in a fresh fork that imports ethosweep's own
code from disk, in the client's directory and environment. Keyed by a fingerprint of the Python
environment and of this module; a job that crashes kills only its fork; the server exits after
IDLE_SECONDS without jobs (ETHOSWEEP_WORKER_IDLE), or when told to; a single-threaded accept loop
forks with no other thread's lock held. ETHOSWEEP_WORKER=0 runs every job in a process of its own,
ETHOSWEEP_WORKER_DIR puts the sockets elsewhere (a benchmark's cold runs). In a SLURM job only the
job's own Snakemake starts one, bound to it, for its job steps. docs/how-it-works.md says why each
of these holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ethosweep.runtime.inherited import export, inherited

IDLE_SECONDS = 300
START_TIMEOUT_SECONDS = 180
PRELOAD = (
    "torch",
    "torchvision",
    "torchao.quantization.pt2e.quantize_pt2e",
    "executorch.exir",
    "executorch.exir.serde.serialize",
    "executorch.backends.arm.ethosu",
    "executorch.backends.arm.quantizer",
    "executorch.backends.cortex_m.passes.replace_quant_nodes_pass",
    "executorch.devtools.backend_debug",
    "executorch.devtools",
    "tosa_reference_model",
    "sklearn.datasets",
    # the report's jobs, when a server is up (ethosweep.runtime.jobs.WARM_IF_SERVING)
    "matplotlib.pyplot",
    "jinja2",
)


def switched_off() -> bool:
    return os.environ.get("ETHOSWEEP_WORKER", "1") in ("0", "false", "no", "off")


def enabled() -> bool:
    if switched_off():
        return False
    # in a cluster job: the server its batch step started (serve_cluster_job), if it did
    return not cluster_job() or _serving(socket_path())


def cluster_job() -> str | None:
    """The SLURM job this process runs in, if any."""
    return os.environ.get("SLURM_JOB_ID") or None


def fingerprint() -> str:
    """Identifies the Python environment a server was started from, and the ethosweep checkout:
    the server imports this package (its `runtime` modules) before forking, so two checkouts on
    one machine (a benchmark's before and after) must not share a server. (Looked up once by
    the Snakemake process, see export_fingerprint.)"""
    return inherited("WORKER_FINGERPRINT", _look_up_fingerprint)


def export_fingerprint() -> None:
    export("WORKER_FINGERPRINT", _look_up_fingerprint())
    export("TEMP_DIR", _temp_dir())


def _look_up_fingerprint() -> str:
    import hashlib

    from ethosweep.runtime.packages import distributions_key

    # this module's own code too: it is the one part of ethosweep a server runs (the jobs' children
    # import everything else afresh), and a server outlives its run
    here = Path(__file__).resolve()
    parts = [distributions_key(), str(here.parents[1]), hashlib.sha256(here.read_bytes()).hexdigest()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


WORKER_DIR = "ETHOSWEEP_WORKER_DIR"


def socket_folder() -> Path:
    """Where the servers' sockets are: $ETHOSWEEP_WORKER_DIR, or a folder of the user's own."""
    chosen = os.environ.get(WORKER_DIR)
    base = (
        Path(chosen)
        if chosen
        else Path(os.environ.get("XDG_RUNTIME_DIR") or inherited("TEMP_DIR", _temp_dir)) / f"ethosweep-{os.getuid()}"
    )
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    return base


def _temp_dir() -> str:
    import tempfile  # looked up once by the Snakemake process: a tenth of a job client's start

    return tempfile.gettempdir()


def socket_path() -> Path:
    job = cluster_job()
    return socket_folder() / (f"worker-{fingerprint()}-slurm{job}.sock" if job else f"worker-{fingerprint()}.sock")


# ---- client -------------------------------------------------------------------


class Unavailable(Exception):
    """No server could be reached or started: run the job in-process."""


def submit(request: dict[str, Any]) -> dict[str, Any]:
    """Run a job request in a warm server's child; returns its outcome dict."""
    path = socket_path()
    conn = _connect(path) or (_wait_for_server(path) if cluster_job() else _start_and_connect(path))
    return _exchange(conn, request)


def submit_if_serving(request: dict[str, Any]) -> dict[str, Any] | None:
    """Run a job request in a server that is already up; None if none is (then it is not worth
    starting one for this job)."""
    conn = _connect(socket_path())
    return None if conn is None else _exchange(conn, request)


def _exchange(conn: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    with conn:
        conn.sendall((json.dumps(request) + "\n").encode())
        reply = _read_line(conn)
    if not reply:
        return {"ok": False, "reason": "the job's worker process died without a result (see the job's log)"}
    return json.loads(reply)


def shutdown(path: Path | None = None, if_idle: bool = False) -> bool:
    """Ask this environment's server (or the one at `path`) to exit (running jobs finish); with
    `if_idle`, only if it runs no job. True if it exits."""
    conn = _connect(path or socket_path())
    if conn is None:
        return False
    with conn:
        conn.sendall(json.dumps({"shutdown": True, "if_idle": if_idle}).encode() + b"\n")
        reply = _read_line(conn)
    try:
        return bool(json.loads(reply or b"{}").get("ok"))
    except ValueError:
        return False


def shutdown_all(folder: Path | None = None, if_idle: bool = False) -> int:
    """Ask every server in `folder` (default: socket_folder()) to exit, or (`if_idle`) those running
    no job; how many exit. A benchmark stops the servers of the folder it gave its own runs."""
    return sum(shutdown(path, if_idle) for path in (folder or socket_folder()).glob("worker-*.sock"))


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    return conn


def _start_and_connect(path: Path) -> socket.socket:
    """Start a server (one per environment, whoever gets the lock) and connect to it."""
    with open(f"{path}.spawn", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first jobs wait for one server
        conn = _connect(path)
        if conn is not None:
            return conn
        remove_exited_servers_files(path.parent, keep=path)
        process = _spawn(path)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            if process.poll() is not None:
                raise Unavailable(f"the worker exited with status {process.returncode} (see {path}.log)")
            time.sleep(0.2)
        process.kill()
        raise Unavailable(f"the worker did not start within {START_TIMEOUT_SECONDS} s (see {path}.log)")


def _spawn(path: Path, anchor: int | None = None):  # -> subprocess.Popen
    import subprocess  # only a client that starts a server needs it

    idle = os.environ.get("ETHOSWEEP_WORKER_IDLE", str(IDLE_SECONDS))
    with open(f"{path}.log", "a") as log:  # the server has its own copy; the starter keeps none
        return subprocess.Popen(
            [sys.executable, "-m", "ethosweep.runtime.worker", str(path), idle, *([str(anchor)] if anchor else [])],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def serve_cluster_job(argv: list[str]) -> None:
    """In a cluster job's own Snakemake (its batch step: SLURM_STEP_ID unset), which runs each of the
    jobs its command line names (`--target-jobs`) in a job step of its own: start the job's server,
    bound to this process, if there are several (for one, the server would import torch instead of
    its client: nothing to share)."""
    if switched_off() or not cluster_job() or os.environ.get("SLURM_STEP_ID") is not None:
        return
    if len(target_jobs(argv)) < 2:
        return
    path = socket_path()
    with open(f"{path}.spawn", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _serving(path):
            return
        process = _spawn(path, anchor=os.getpid())
        # the steps look for the server's lock (enabled): hold on until it is taken
        deadline = time.monotonic() + 10
        while not _serving(path) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)


def target_jobs(argv: list[str]) -> list[str]:
    """The jobs a Snakemake command line runs remotely: `--target-jobs rule:wildcards ...`."""
    if "--target-jobs" not in argv:
        return []
    named = argv[argv.index("--target-jobs") + 1 :]
    return named[: next((i for i, arg in enumerate(named) if arg.startswith("-")), len(named))]


def _serving(path: Path) -> bool:
    """A server holds `path`'s lock: it serves, or is importing to serve."""
    try:
        with open(f"{path}.lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _wait_for_server(path: Path) -> socket.socket:
    """Connect to a server that is starting (its job's, in a cluster job step)."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        conn = _connect(path)
        if conn is not None:
            return conn
        if not _serving(path):
            raise Unavailable(f"the cluster job's worker exited (see {path}.log)")
        time.sleep(0.2)
    raise Unavailable(f"the cluster job's worker did not start within {START_TIMEOUT_SECONDS} s (see {path}.log)")


# A server's files (its lock, spawn lock and log; its socket too if it crashed) outlast it: each
# environment, checkout and edit of this module has a server of its own, so they would pile up.
# Removed when a server is started (a rare moment, under the spawn lock), only for servers that
# exited a while ago: the log says why a server that just exited did so, and a server starting
# holds its lock.
STALE_SECONDS = 2 * IDLE_SECONDS
_SERVER_FILES = (".lock", ".spawn", ".log", "")


def remove_exited_servers_files(directory: Path, keep: Path, stale_seconds: float = STALE_SECONDS) -> int:
    """Remove the files of every server in `directory` but `keep`'s that holds no lock and none of
    whose files was touched for `stale_seconds`; how many servers' files were removed."""
    removed = 0
    for lock_path in directory.glob("worker-*.sock.lock"):
        socket_file = lock_path.with_suffix("")
        if socket_file == keep or _recently_active(socket_file, stale_seconds):
            continue
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a server is running (or starting)
            for suffix in _SERVER_FILES:
                Path(f"{socket_file}{suffix}").unlink(missing_ok=True)
        removed += 1
    return removed


def _recently_active(socket_file: Path, seconds: float) -> bool:
    """A file of the server was touched within `seconds` (its log written, its spawn lock opened)."""
    times = []
    for suffix in _SERVER_FILES:
        with contextlib.suppress(FileNotFoundError):
            times.append(Path(f"{socket_file}{suffix}").stat().st_mtime)
    return bool(times) and time.time() - max(times) < seconds


def _read_line(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks).strip()


# ---- server -------------------------------------------------------------------


def serve(path: Path, idle_seconds: float = IDLE_SECONDS, anchor: int | None = None) -> None:
    """Serve jobs at `path` until idle for `idle_seconds`, told to stop, or (`anchor`) that process gone."""
    with open(f"{path}.lock", "w") as lock:
        if not _take(lock):
            print(f"another worker serves {path}", flush=True)
            return
        _preload()
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(64)
        listener.settimeout(1.0)
        children: set[int] = set()
        last_activity = time.monotonic()
        try:
            while True:
                _reap(children)
                if not children and time.monotonic() - last_activity > idle_seconds:
                    print("worker: idle, exiting", flush=True)
                    break
                if anchor is not None and not _alive(anchor):
                    print(f"worker: process {anchor} (its cluster job's Snakemake) ended, exiting", flush=True)
                    break
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                last_activity = time.monotonic()
                conn.settimeout(10)
                try:
                    request = json.loads(_read_line(conn) or b"{}")
                except (OSError, ValueError):
                    conn.close()
                    continue
                if request.get("shutdown"):
                    _reap(children)
                    busy = bool(children) and request.get("if_idle")
                    conn.sendall(b'{"ok": false, "busy": true}\n' if busy else b'{"ok": true}\n')
                    conn.close()
                    if busy:
                        continue
                    print("worker: shutdown requested", flush=True)
                    break
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    os._exit(_child(conn, request))
                children.add(pid)
                print(f"worker: {request.get('label', '?')} in process {pid}", flush=True)
                conn.close()
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_ino == os.stat(path).st_ino:
                    path.unlink()


def _preload() -> None:
    """Import what every job imports, once, before the first fork."""
    started = time.perf_counter()
    # ETHOSWEEP_WORKER_PRELOAD (comma-separated modules) lets the tests start a light server.
    preload = os.environ.get("ETHOSWEEP_WORKER_PRELOAD")
    for module in preload.split(",") if preload else PRELOAD:
        __import__(module)
    # Move everything imported so far out of the cyclic GC's reach: with torch and
    # ExecuTorch loaded, a full collection walks ~600k objects (~0.3 s, and in a fork it
    # writes to every one of them, copying the whole heap). Children inherit the freeze.
    gc.freeze()
    print(f"worker {os.getpid()}: preloaded in {time.perf_counter() - started:.1f} s", flush=True)


def _take(lock, seconds: float = 2.0) -> bool:
    """The server's lock, retried briefly: a client looking whether a server runs (_serving) holds
    it shared for an instant."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: alive, another user's
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reap(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
        children.discard(pid)


def _child(conn: socket.socket, request: dict[str, Any]) -> int:
    """Run one job in this fresh fork; reply with its outcome."""
    conn.settimeout(None)
    finished = threading.Event()
    try:
        os.setsid()  # its own process group: the job's subprocesses (Vela) stop with it
        _adopt_client_context(request)
        _stop_when_client_leaves(conn, finished)
        from ethosweep.runtime.execute import execute  # fresh from the client's sys.path

        outcome = execute(request)
    except BaseException as error:  # noqa: BLE001 - the reply must always be sent
        # the job's client went away (Stopped), or the runner itself failed: not the cell's
        outcome = {"ok": False, "reason": f"{type(error).__name__}: {error}", "fault": "INTERRUPT", "recorded": False}
    finished.set()
    try:
        conn.sendall((json.dumps(outcome) + "\n").encode())
    except OSError:
        pass
    return 0 if outcome.get("ok") else 1


def _adopt_client_context(request: dict[str, Any]) -> None:
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["sys_path"]
    for name in [m for m in sys.modules if m == "ethosweep" or m.startswith("ethosweep.")]:
        del sys.modules[name]
    signal.signal(signal.SIGTERM, _raise_stopped)


def _raise_stopped(signum, frame):
    from ethosweep.runtime.errors import Stopped  # fresh from the client's sys.path

    raise Stopped(f"stopped by signal {signum}")


def _stop_when_client_leaves(conn: socket.socket, finished: threading.Event) -> None:
    """If the client disconnects before the job is done, stop the job (SIGTERM: temp files are removed)."""

    def watch():
        try:
            data = conn.recv(1)
        except OSError:
            data = b""
        if not data and not finished.is_set():
            os.killpg(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    serve(
        Path(sys.argv[1]),
        float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_SECONDS,
        int(sys.argv[3]) if len(sys.argv) > 3 else None,
    )
