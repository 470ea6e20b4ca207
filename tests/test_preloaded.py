"""The tests' runs of `python -m <module>` and `python <script>` forked from a server that imported
their libraries (tests/preloaded.py) see and leave what a new interpreter's would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import preloaded

PROBE = """
    import atexit, json, os, sys
    atexit.register(lambda: print("at exit", flush=True))
    print(json.dumps({"name": __name__, "file": __file__, "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path,
                      "env": os.environ.get("PROBE_VALUE"), "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
"""


def test_a_run_from_the_server_is_the_interpreters(tmp_path):
    """Its arguments, working directory, import path, environment, empty stdin, both outputs, atexit
    handlers and exit status, for two runs in a row (the second from the same server)."""
    (tmp_path / "probe").mkdir()  # a package: its server imports it, its __main__ is the run
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "probe" / "__main__.py").write_text(textwrap.dedent(PROBE))
    where = tmp_path / "cwd"
    where.mkdir()
    for status in ("3", "0"):
        env = {"PYTHONPATH": str(tmp_path), "PROBE_VALUE": f"value {status}", "PATH": "/usr/bin:/bin"}
        command = [sys.executable, "-m", "probe", status, "two words"]
        fresh = subprocess.run(command, capture_output=True, text=True, env=env, cwd=where, stdin=subprocess.DEVNULL)
        out, err = tmp_path / "out", tmp_path / "err"
        returncode = preloaded.run_module("probe", command[3:], cwd=str(where), env=env, stdout=out, stderr=err)
        assert (returncode, out.read_text(), err.read_text()) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert fresh.returncode == int(status) and fresh.stdout.endswith("at exit\n")


def test_a_script_run_from_the_server_is_the_interpreters(tmp_path):
    """The same for a script named by a relative path, as the benchmarks are run (their server, in
    the session's environment: the one tests/test_benchmarks.py uses), and its folder on the path."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "probe.py").write_text(textwrap.dedent(PROBE))
    for status in ("0", "4"):
        env = {**os.environ, "PROBE_VALUE": f"value {status}"}
        command = [sys.executable, "scripts/probe.py", status, "two words"]
        fresh = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
        forked = preloaded.run(command, env, cwd=tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert fresh.returncode == int(status) and str(tmp_path / "scripts") in fresh.stdout
