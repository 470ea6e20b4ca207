"""`python -m snakemake` for the tests, forked from a process that imported Snakemake once.

A new interpreter spends about 0.65 of the 0.9 CPU-seconds of a small run's Snakemake on importing
Snakemake and the libraries it imports during a run, and collecting its plugins; the suite starts
Snakemake about 150 times. Here a server per pytest-xdist worker does that once and forks a process
per run, which then runs as the interpreter would: `runpy` runs `snakemake` as `__main__` with the
run's arguments, environment, working directory (also sys.path[0], as `-m` puts it there) and
files for its output, and it ends as a Python program ends (atexit handlers, its exit status). Only
third-party modules are imported before the fork: ethosweep is imported by the run itself, so the
code under test and its reading of the environment are the run's own. A run whose environment
changes how Python finds modules (a PYTHON* variable) starts a new interpreter, as before.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What a run of the workflow imports besides ethosweep (measured with sys.modules after a run)
PRELOAD = (
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
)
REGISTRIES = (
    "snakemake_interface_executor_plugins.registry:ExecutorPluginRegistry",
    "snakemake_interface_storage_plugins.registry:StoragePluginRegistry",
    "snakemake_interface_report_plugins.registry:ReportPluginRegistry",
    "snakemake_interface_logger_plugins.registry:LoggerPluginRegistry",
    "snakemake_interface_scheduler_plugins.registry:SchedulerPluginRegistry",
)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for path in REGISTRIES:
        module, cls = path.split(":")
        getattr(importlib.import_module(module), cls)()  # a singleton: collects the installed plugins


def _serve() -> dict:
    """Answer requests on stdin until it closes; returns only in a forked child, with its request."""
    requests = os.fdopen(0, "rb", buffering=0)
    while line := _read_line(requests):
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(1, json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    os._exit(0)


def _read_line(stream) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        byte = stream.read(1)
        if not byte:
            return b""
        line += byte
    return line


def _run_snakemake(request: dict) -> None:
    """In the forked child: become `python -m snakemake <args>` started with the request's settings."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.path.insert(0, request["cwd"])
    sys.argv = ["-m", *request["args"]]
    sys.orig_argv = [sys.executable, "-m", "snakemake", *request["args"]]
    runpy.run_module("snakemake", run_name="__main__", alter_sys=True)


class _Server:
    """The forking server of this pytest-xdist worker, started on first use."""

    def __init__(self):
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def start(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            self.env = dict(os.environ)
            self.process = subprocess.Popen(
                [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env
            )
        return self.process

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with `env` imports what a new interpreter would (no PYTHON* variable differs)."""
        names = {name for name in (*env, *self.env) if name.startswith("PYTHON")}
        return self.process is None or all(env.get(name) == self.env.get(name) for name in names)

    def run(self, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        with self.lock, tempfile.TemporaryDirectory(prefix="snakemake-run") as folder:
            process = self.start()
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"args": args, "env": env, "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            json.loads(process.stdout.readline())  # its pid
            reply = process.stdout.readline()
            if not reply:
                raise RuntimeError("the Snakemake forking server ended during a run")
            returncode = json.loads(reply)["returncode"]
            command = [sys.executable, "-m", "snakemake", *args]
            return subprocess.CompletedProcess(command, returncode, out.read_text(), err.read_text())


SERVER = _Server()


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True, env=env) for a `python -m snakemake`
    command line, from the forking server where it imports what a new interpreter would."""
    assert command[:3] == [sys.executable, "-m", "snakemake"], command
    if not SERVER.serves(env):
        return subprocess.run(command, capture_output=True, text=True, env=env)
    return SERVER.run(command[3:], env)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: a run's sys.path[0] is its working directory
    _preload()
    _run_snakemake(_serve())
