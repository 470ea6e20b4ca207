"""`python -m <module> <args>` and `python <script> <args>` for the tests, forked from a server
that imported their libraries once.

Most of a small Snakemake run's start (0.65 of 0.9 CPU-seconds), of the seeds' way's and of a
benchmark script's (~4-9 CPU-seconds: torch, ExecuTorch) is imports. One server per module (the
scripts and ExecuTorch's modules share the torch one) and import environment (PYTHON*, thread
counts), shared by the session's pytest-xdist workers and benchmark scripts, imports the third-party
libraries and forks each run, which `runpy` runs as `__main__` with the run's arguments, environment,
working directory and output files, ending as a program ends (atexit, exit status); ethosweep is
imported by the run itself. Unlike new interpreters, a server's runs share its hash seed: a test
comparing two runs for determinism starts one afresh. A server ends after IDLE_SECONDS without a run."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import importlib
import importlib.machinery
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

# Where the servers' sockets are; tests/conftest.py sets it to a folder of the test session's
FOLDER_VARIABLE = "PRELOADED_SERVERS"
IDLE_SECONDS = 120
STARTUP_SECONDS = 300

# What each server imports: Snakemake's runs' libraries (read from sys.modules after a run of the
# workflow; its plugin registries are singletons that collect once), or torch's and ExecuTorch's for
# every other run (the benchmark scripts, the seeds' way); never ethosweep
TORCH = "torch"
PRELOAD = {
    "snakemake": (
        "snakemake.cli",
        "snakemake.api",
        "snakemake.workflow",
        "snakemake.dag",
        "snakemake.persistence",
        "snakemake.report",
        "snakemake.script",
        "snakemake.utils",
        "jsonschema",
        "nbformat",
        "packaging.requirements",
        "platformdirs",
        "requests",
        "yaml",
        "snakemake_interface_executor_plugins.registry:ExecutorPluginRegistry",
        "snakemake_interface_storage_plugins.registry:StoragePluginRegistry",
        "snakemake_interface_report_plugins.registry:ReportPluginRegistry",
        "snakemake_interface_logger_plugins.registry:LoggerPluginRegistry",
        "snakemake_interface_scheduler_plugins.registry:SchedulerPluginRegistry",
    ),
    TORCH: (
        "torch",
        "torchvision.models",
        "executorch.exir",
        "executorch.backends.arm.scripts.aot_arm_compiler",
        "numpy",
        "yaml",
    ),
}


def _server(module: str) -> str:
    """Which server runs a module: the torch one for a script or ExecuTorch's, else the module's own
    (which imports what PRELOAD names for it, or the module itself)."""
    return TORCH if not module or module.startswith("executorch.") else module


def run(
    command: list[str], env: dict[str, str], timeout: float | None = None, cwd: str | Path | None = None
) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    for a `python -m <module>` or `python <script>` command line, from its server (past `timeout`
    seconds: TimeoutError, and the run is left to end)."""
    assert command[0] == sys.executable, command
    cwd = str(cwd or os.getcwd())
    with tempfile.TemporaryDirectory(prefix="preloaded") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        if command[1] == "-m":
            request = _request(command[3:], cwd, env, out, err, module=command[2])
        else:
            request = _request(command[2:], cwd, env, out, err, script=command[1])
        returncode = _ask(request, timeout)
        return subprocess.CompletedProcess(command, returncode, out.read_text(), err.read_text())


def run_module(module: str, args: list[str], cwd: str, env: dict[str, str], stdout: Path, stderr: Path) -> int:
    """`python -m module args` in `cwd` with `env`, its output to the two files; its exit status."""
    return _ask(_request(args, cwd, env, stdout, stderr, module=module))


def _request(args, cwd: str, env: dict[str, str], stdout: Path, stderr: Path, module="", script="") -> dict:
    """What a server needs to run `python -m module args` (or `python script args`)."""
    return {
        "module": module,
        "script": script,
        "args": args,
        "env": env,
        "cwd": cwd,
        "stdout": str(stdout),
        "stderr": str(stderr),
    }


def _ask(request: dict, timeout: float | None = None) -> int:
    """A run of `request` by its server: its exit status."""
    server = _server(request["module"])
    with _connected(server, request["env"]) as conn:
        conn.settimeout(timeout)
        conn.sendall(json.dumps(request).encode() + b"\n")
        reply = _read_line(conn)
    if not reply:
        raise RuntimeError(f"the server of {server} ended during a run")
    return json.loads(reply)["returncode"]


def _read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and (chunk := conn.recv(65536)):
        line += chunk
    return line


def _socket_path(server: str, env: dict[str, str]) -> Path:
    folder = Path(os.environ.get(FOLDER_VARIABLE) or Path(tempfile.gettempdir()) / f"preloaded-{os.getuid()}")
    if len(str(folder)) > 60:  # a Unix socket's path has at most 107 bytes: a short folder named after it
        folder = Path("/tmp") / f"preloaded-{os.getuid()}-{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    key = json.dumps([sys.executable, __file__, server, sorted(_import_settings(env).items())])
    return folder / f"{server.rsplit('.', 1)[-1]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.sock"


# What a server is keyed by: the variables read when the preloaded modules are imported (how Python
# finds modules; torch's thread count)
IMPORT_SETTINGS = ("PYTHON", "OMP_", "MKL_")


def _import_settings(env) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith(IMPORT_SETTINGS)}


@contextlib.contextmanager
def _connected(server: str, env: dict[str, str]):
    path = _socket_path(server, env)
    conn = _connect(path)
    if conn is None:
        with open(f"{path}.lock", "w") as lock:  # one server per socket: the first to find none starts it
            fcntl.flock(lock, fcntl.LOCK_EX)
            conn = _connect(path) or _start(path, server, env)
    with conn:
        yield conn


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        return conn
    except OSError:
        conn.close()
        return None


def _start(path: Path, server: str, env: dict[str, str]) -> socket.socket:
    path.unlink(missing_ok=True)
    server_env = {**{k: v for k, v in os.environ.items() if not k.startswith(IMPORT_SETTINGS)}, **_import_settings(env)}
    with open(f"{path}.log", "a") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, str(path), server],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=server_env,
            start_new_session=True,  # not stopped with the run that started it: it serves the session
        )
    deadline = time.monotonic() + STARTUP_SECONDS
    while (conn := _connect(path)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server of {server} did not start (its log: {path}.log)")
        time.sleep(0.05)
    return conn


# ---- the server ---------------------------------------------------------------------------


def _preload(server: str) -> None:
    for name in PRELOAD.get(server, (server,)):
        name, _, singleton = name.partition(":")
        imported = importlib.import_module(name)
        if singleton:
            getattr(imported, singleton)()


def _serve(path: Path, server: str) -> dict:
    """Fork a run for each connection until IDLE_SECONDS pass without one; returns only in a run's
    process, with its request. A run's status is sent by a process between the two (forked for each
    connection), which waits for it, so that the server takes the next connection at once."""
    _preload(server)
    # the imported modules out of the cyclic GC's reach, as the warm worker does: a run's full
    # collections would walk (and in a fork copy) them all (docs/performance.md)
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    listener.settimeout(IDLE_SECONDS)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiting processes end unwaited for
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            path.unlink(missing_ok=True)
            os._exit(0)
        if os.fork() == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            listener.close()
            request = json.loads(_read_line(conn))
            pid = os.fork()
            if pid == 0:
                conn.close()
                return request
            _, status = os.waitpid(pid, 0)
            conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            os._exit(0)
        conn.close()


def _run(request: dict) -> None:
    """In a run's process: become `python -m module <args>` (or `python <script> <args>`) started
    with the request's settings."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    same = request["stderr"] == request["stdout"]  # one file for both: one offset, as 2>&1 gives
    err = out if same else os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    if request["script"]:  # as `python <script>`: its folder first on the path, its absolute path its __file__
        script = os.path.abspath(request["script"])
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
        sys.argv = [request["script"], *request["args"]]
        sys.orig_argv = [sys.executable, *sys.argv]
        main = sys.modules["__main__"] = types.ModuleType("__main__")  # runpy.run_path would make argv[0] absolute
        main.__file__, main.__loader__ = script, importlib.machinery.SourceFileLoader("__main__", script)
        exec(compile(Path(script).read_bytes(), script, "exec"), main.__dict__)
        return
    sys.path.insert(0, request["cwd"])
    sys.argv = ["-m", *request["args"]]
    sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: a run's sys.path[0] is its working directory
    _run(_serve(Path(sys.argv[1]), sys.argv[2]))
