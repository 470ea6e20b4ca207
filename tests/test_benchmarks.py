"""Every benchmark runs to its verdict in a small mode: a benchmark that breaks fails a test."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def run_benchmark(script: str, *args: str, workdir) -> str:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"{script} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_the_vela_versions_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("vela_versions.py", "--smoke", "--cores", "2", workdir=tmp_path)
    for figure in ("one more Vela version, per cell", "Vela alone, per cell", "cell / Vela alone", "the seeds' way"):
        assert figure in out, out
    assert "planned: install_vela 1, compile_with_vela 2," in out
    assert "same work: the 2 cells of Vela 5.1.0 untouched" in out and "byte-identical Vela command streams" in out
