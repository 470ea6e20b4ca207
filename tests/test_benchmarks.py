"""Every benchmark runs to its verdict in a small mode: a benchmark that breaks fails a test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import preloaded
from conftest import REPO


@pytest.fixture(autouse=True)
def with_the_session_store(session_store, monkeypatch):
    """The benchmarks' runs take from the session's store what another run of the session computed
    (a benchmark runs its models several times: cold, again alone, the seeds' way beside them)."""
    for name, value in session_store.items():
        monkeypatch.setenv(name, value)


def run_benchmark(script: str, *args: str, workdir) -> str:
    """A benchmark's small mode, its cold runs on the session's warm worker (perf/workdirs.py
    own_workers) and store: what is checked here is each step and verdict, not a cold run's time.
    Forked from the session's server that imported torch and ExecuTorch (tests/preloaded.py)."""
    command = [sys.executable, str(REPO / "perf" / script), *args, "--workdir", str(workdir)]
    proc = preloaded.run(command, env={**os.environ, "ETHOSWEEP_BENCHMARK_WORKERS": "shared"}, timeout=1800)
    assert proc.returncode == 0, f"{script} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_the_vela_versions_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("vela_versions.py", "--smoke", "--cores", "2", workdir=tmp_path)
    for figure in ("one more Vela version, per cell", "Vela alone, per cell", "cell / Vela alone", "the seeds' way"):
        assert figure in out, out
    planned = dict(re.findall(r"(\w+) (\d+)", out.split("planned: ")[1].splitlines()[0]))
    assert (planned["install_vela"], planned["compile_with_vela"]) == ("1", "2"), out
    assert "same work: the 2 cells of Vela 5.1.0 untouched" in out and "byte-identical Vela command streams" in out


@pytest.mark.slow
def test_the_sweep_benchmark_reaches_its_identity_verdict(tmp_path):
    out = run_benchmark("sweep.py", "--smoke", "--cores", "2", workdir=tmp_path)
    for figure in ("peer sequential", "ethosweep cold", "cold / peer sequential", "+1 memory mode / new cells alone"):
        assert figure in out, out
    assert "same work: all 2 cells have equal programs" in out


def has_commit(rev: str) -> bool:
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{rev}^{{commit}}"]).returncode == 0


@pytest.mark.slow
def test_the_compile_once_benchmark_reaches_its_verdicts(tmp_path):
    before = re.search(r'^BEFORE = "(\w+)"', (REPO / "perf" / "compile_once.py").read_text(), re.M).group(1)
    if not has_commit(before):
        pytest.skip(f"needs the repository's history (commit {before}, the workflow before compile-once)")
    out = run_benchmark("compile_once.py", "--smoke", "--cores", "2", workdir=tmp_path)
    assert "same results: all 4 cells' .pte files byte-identical" in out, out
    assert "cell / Vela alone" in out and "cells compiled, each partition's Vela cycles equal to Vela alone's" in out


def test_the_verify_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("verify.py", "--smoke", workdir=tmp_path)
    assert (
        "verify one (model, scheme, profile), 500 held-out samples" in out and "NPU vs quantized: identical" in out
    ), out
    assert "quantized vs float: ok" in out, out  # a trained model on its own data: both questions answered


def test_the_zoo_numerics_benchmark_reaches_its_verdicts(tmp_path):
    out = run_benchmark("zoo_numerics.py", "--smoke", workdir=tmp_path)
    assert out.startswith("squeezenet1_1") and "FLAGGED WITHOUT A LAYER" not in out, out
    assert out.strip().splitlines()[-1].split()[0] == "1", out  # one verdict counted


@pytest.mark.slow
def test_the_zoo_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("zoo.py", "--smoke", "--cores", "2", workdir=tmp_path)
    assert "cells per hour" in out and "operators on the NPU" in out and "verdict: 5 cells" in out, out
    # the residual block Vela refuses on Ethos-U55 in a16w8: located, fallen back, its cost printed
    assert re.search(r"residual/a16w8/ethos-u55-128/\S+: located in 5 Vela runs, [\d.]+ s; fallback", out), out
    index = (tmp_path / "sweep/results/report/index.html").read_text()
    assert index.index('id="operators"') < index.index('id="pick"')  # a preset's report opens on the map


@pytest.mark.slow
def test_the_zoo_benchmark_side_by_side_reaches_its_identity_verdict(tmp_path):
    out = run_benchmark("zoo.py", "--smoke", "--peer", "parallel", "--quick", "--cores", "2", workdir=tmp_path)
    assert re.search(r"ethosweep cold / the seeds' way 2 at a time\s+[\d.]+", out), out
    assert "numerics of its 2 rows: all 'not verified'" in out, out  # the exploratory sweep, timed too
    # calibrated on the same 100 random inputs (dataset: random), both sides compiled the same programs
    assert "same work: all 2 cells have equal programs" in out and "verdict: 2 cells" in out, out
    assert re.search(r"job-seconds per stage .*\n(  \w+ +[\d.]+ s .*\n)*  lower +[\d.]+ s", out), out


@pytest.mark.slow
def test_the_plan_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("plan.py", "--smoke", "--noop", "--repeat", "1", workdir=tmp_path)
    assert "compile_with_vela 32," in out and "verdict: the plan is the matrix, 32 cells" in out, out
    # the matrix run for real, then a run that finds it finished
    assert re.search(r"no-op run \(snakemake --cores 2, nothing to be done\) min [\d.]+ s.*, 32 summary rows", out), out
    assert re.search(r"verdict: a no-op run of 32 finished cells, [\d.]+ s median", out), out


@pytest.mark.slow
def test_the_cache_benchmark_reaches_its_identity_verdict(tmp_path):
    out = run_benchmark("cache.py", "--smoke", "--cores", "2", workdir=tmp_path)
    for figure in ("second / first", "second / without the store"):
        assert figure in out, out
    assert re.search(r"the store served (\d+) of \1 export/quantize/lower/verify jobs", out), out
    # the second experiment: Sram_Only on both targets and the board's Shared_Sram on U55, two models
    assert "same work: all 6 programs byte-identical" in out, out


def test_the_coverage_benchmark_prints_its_table():
    proc = preloaded.run([sys.executable, str(REPO / "perf" / "coverage.py"), "--repeats", "20"], dict(os.environ), 600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| mean, lognormal |" in proc.stdout and "| paired difference, [0.6, 0.1, 0.1, 0.2] |" in proc.stdout
    assert re.search(r"lowest: \d+\.\d %", proc.stdout)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_report_load_benchmark_reaches_its_verdict(tmp_path):
    out = run_benchmark("report_load.py", "--synthetic", "600", "--repeats", "1", workdir=tmp_path)
    assert "verdict: the first screen is drawn before the table of all cells" in out, out
    page_mb = float(re.search(r"page ([\d.]+) MB", out).group(1))
    assert 0.1 < page_mb < 5, out  # 600 cells, no cell page inlined twice
    page = (tmp_path / "index.html").read_text()
    # past 300 cells the page links to each cell's own page, and the matrix has a column per target
    assert 'href="cells/model_00/int8/ethos-u55-128/' in page and 'id="cell-' not in page
    # the first screen is what to pick: the tables of picks before the matrix of every model
    assert page.index('<section class="pick">') < page.index('id="sweep-matrix"')
