"""The summary, the operator map and the report always describe the run that made them.

Only rules write them, from every cell's outcome (failed cells record theirs: ethosweep.runtime.
outcome), so switching configs, failing cells and interrupting the end of a run never leaves one
that describes another matrix, and Snakemake never calls one up to date that does not match its
config.
"""

import csv
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, make_workdir, planned_jobs, snakemake, snakemake_command, typed

MNIST = {"name": "mnist", "file": "models/mnist.py"}
# A: one cell. B: two memory modes, a model whose forward() raises, and a target Vela refuses.
CONFIG_A = {"models": [MNIST], "targets": ["ethos-u55-128"], "memory_modes": ["Shared_Sram"]}
CONFIG_B = {
    "models": [MNIST, {"name": "forward_raises", "file": "tests/models/forward_raises.py"}],
    "targets": [
        "ethos-u55-128",
        {
            "target": "ethos-u85-256",
            "system_config": "Test_U85_Broken",
            "vela": {"config": "tests/data/broken_vela.ini"},
        },
    ],
    "memory_modes": ["Shared_Sram", "Sram_Only"],
}
B_CELLS = 6  # 2 models x (U55 x 2 memory modes + the U85 config, whose vela.ini has Shared_Sram only)


def use_config(workdir: Path, config: dict) -> None:
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def summary(workdir: Path) -> list[dict]:
    return list(csv.DictReader(open(workdir / "results/summary.csv", newline="")))


def report_heading(workdir: Path) -> str:
    index = (workdir / "results/report/index.html").read_text()
    return index[index.index("cells compiled") - 40 : index.index("cells compiled")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = make_workdir(tmp_path_factory.mktemp("switch"), CONFIG_A)
    shutil.copytree(REPO / "tests" / "models", work / "tests" / "models")
    shutil.copytree(REPO / "tests" / "data", work / "tests" / "data", dirs_exist_ok=True)
    return work


def test_switching_configs_with_failed_cells_always_reports_the_last_run(workdir, session_store):
    for config, cells, ok in ((CONFIG_A, 1, 1), (CONFIG_B, B_CELLS, 2), (CONFIG_A, 1, 1), (CONFIG_B, B_CELLS, 2)):
        use_config(workdir, config)
        proc = snakemake(workdir, env=session_store)  # recorded failures end in the summary, not in a failed run
        rows = summary(workdir)
        assert len(rows) == cells and sum(r["status"] == "ok" for r in rows) == ok
        assert {r["model"] for r in rows} == {m["name"] for m in config["models"]}
        # what the run printed and the report's heading are this matrix
        assert f"{ok} of {cells} cells ok" in proc.stderr
        assert f"<b>{ok} of {cells}" in report_heading(workdir)
        operators = (workdir / "results/operators.csv").read_text()
        assert ("rejected by Vela" in operators) == (config is CONFIG_B)
        assert planned_jobs(workdir) == {}, config
    # the second time round nothing of B's cells was compiled again: their failures were kept
    assert "FAILED export_model forward_raises" not in proc.stderr


def test_snakemakes_own_report_after_a_run_with_failed_cells(workdir, session_store, tmp_path):
    use_config(workdir, CONFIG_B)
    snakemake(workdir, env=session_store)
    built = subprocess.run(
        snakemake_command(workdir, "--report", str(tmp_path / "report.zip")), capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-3000:]
    listing = subprocess.run(
        ["python3", "-m", "zipfile", "-l", str(tmp_path / "report.zip")], capture_output=True, text=True
    )
    assert "forward_raises/int8/ethos-u55-128" in listing.stdout and "index.html" in listing.stdout


def test_a_cell_that_compiled_before_and_fails_now_is_reported_failed(tmp_path, session_store):
    """Existence is never success: the earlier run's program and figures are replaced by this
    run's failure record, and the summary says failed."""
    from ethosweep.runtime.outcome import failure_of

    work = make_workdir(tmp_path, {**CONFIG_A, "models": [MNIST, {"name": "changing", "file": "models/changing.py"}]})
    model = work / "models" / "changing.py"
    shutil.copy(REPO / "models" / "mnist.py", model)
    snakemake(work, env=session_store)
    cell = "changing/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    before = {r["model"]: r for r in summary(work)}["changing"]
    assert before["status"] == "ok" and before["vela_cycles_total"]

    model.write_text(model.read_text() + "\n\nModelInputs = (ModelInputs[0][:, :, :5],)  # too small now\n")
    snakemake(work, env=session_store)
    after = {r["model"]: r for r in summary(work)}["changing"]
    assert after["status"] == "failed" and after["reason"].startswith("export: model 'changing' (models/changing.py)")
    assert after["vela_cycles_total"] == "" and after["pte_bytes"] == ""
    assert failure_of(work / "results/vela" / cell / "model.pte")["stage"] == "export"
    page = (work / "results/report/cells" / f"{cell}.html").read_text()
    assert 'v-failed">failed' in page and "cycles (" not in page


def test_killing_the_run_during_its_end_step_leaves_nothing_half_written(tmp_path, session_store):
    work = make_workdir(tmp_path, CONFIG_A)
    snakemake(work, env=session_store)
    # a report setting only the index reads: the run is its end step alone
    use_config(work, {**CONFIG_A, "report": {"latency_budget_ms": 0.5}})
    proc = subprocess.Popen(
        snakemake_command(work), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    index = work / "results/report/index.html"
    deadline = time.monotonic() + 120
    while index.exists():  # the run starts by removing the earlier run's end (onstart)
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # written whole or not at all (a killed atomic write leaves only a hidden .partial beside it)
    assert not index.exists() or "budget 0.5 ms" in index.read_text()
    assert summary(work)[0]["status"] == "ok"  # the summary did not change: it is this config's

    snakemake(work, "--unlock")
    snakemake(work)
    assert "budget 0.5 ms" in index.read_text()
    assert not list((work / "results").rglob("*.partial"))
    assert planned_jobs(work) == {}


def test_recorded_failures_are_retried_when_asked_as_written(workdir, session_store):
    use_config(workdir, CONFIG_B)
    snakemake(workdir, env=session_store)
    listed = typed("uv run ethosweep failed", workdir)
    assert sorted(listed.stdout.split()) == [
        "results/export/forward_raises/program.pt2",
        "results/vela/mnist/int8/ethos-u85-256/Test_U85_Broken/Shared_Sram/model.pte",
    ]
    proc = typed("uv run snakemake --cores 8 --forcerun $(uv run ethosweep failed)", workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # both failed jobs ran again (and failed again, for the same reasons), nothing else compiled
    assert proc.stderr.count("ethosweep: FAILED") == 2
    assert "FAILED export_model forward_raises" in proc.stderr and "FAILED compile_with_vela mnist" in proc.stderr
    assert planned_jobs(workdir) == {}
