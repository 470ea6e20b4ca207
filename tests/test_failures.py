"""Bad input and faults: one broken cell never breaks the matrix, nothing half-written survives.

Each case of the corpus asserts the exact message the user gets (on the terminal and
in results/summary.csv) and that the other cells still completed.
"""

import csv
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import (
    CHECKOUT_LINKS,
    REPO,
    TINY_CONFIG,
    make_workdir,
    model_chain,
    planned_jobs,
    snakemake,
    snakemake_command,
    typed,
)
from ethosweep.verify.verdicts import PASSED
from tosa_edit import replace_partition_tosa, zero_size_tosa

GOOD = {"name": "mnist", "file": "models/mnist.py"}
# Failures of the model itself: recorded as the cells' outcome (ethosweep.runtime.outcome), the run
# succeeds, and the summary and report name them.
BAD_MODELS = {
    "syntax_error": "export: model 'syntax_error' (tests/models/syntax_error.py): syntax error at line 3: '(' was "
    "never closed",
    "no_inputs": "export: model 'no_inputs' (tests/models/no_inputs.py): the file defines no ModelInputs; a model "
    "file must "
    "define module-level ModelUnderTest (an nn.Module) and ModelInputs (a tuple of example inputs)",
    "not_a_tuple": "export: model 'not_a_tuple' (tests/models/not_a_tuple.py): ModelInputs must be a tuple of "
    "example inputs, "
    "got Tensor (write `ModelInputs = (x,)` for a single input)",
    "data_dependent": "export: model 'data_dependent' (tests/models/data_dependent.py): torch.export failed (",
    "forward_raises": "export: model 'forward_raises' (tests/models/forward_raises.py): forward() on ModelInputs "
    "raised "
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x4 and 3x3)",
    # a model file that ends its process at import: by sys.exit, or without unwinding (tried again in a
    # fresh process first, as every crash of a job's process is)
    "exits": "export: model 'exits' (tests/models/exits.py): running the file called sys.exit(3)",
    "exits_process": "export: model 'exits_process' (tests/models/exits_process.py) ended with exit status 3 without "
    "a result while importing its file (again in a fresh process)",
    # a native crash in forward(): the model's once it happens again in a fresh process
    "segfaults": "export: model 'segfaults' crashed (SIGSEGV) running forward() on its example inputs (again in a "
    "fresh process)",
    # example inputs no later stage can use, refused where they enter
    "empty_input": "export: model 'empty_input' (tests/models/empty_input.py): example input 0 has no elements "
    "(shape [0, 4])",
    "nan_input": "export: model 'nan_input' (tests/models/nan_input.py): example input 0 holds 1 NaN or infinite "
    "value(s) (shape [1, 4])",
}
# Failures of the machine: the job's process killed (memory), its wall-clock limit. The job fails,
# the run stops before its summary, and the next run retries the job.
MAY_NOT_RECUR = {
    "killed": "export: model 'killed' was killed (SIGKILL) while running forward() on its example inputs, most likely "
    "for memory (peak memory ",
    "hangs": "export: stopped at its wall-clock limit of 1 min (resources.runtime of export_model): model 'hangs' was "
    "still running forward() on its example inputs; raise it with --set-resources export_model:runtime=<minutes>",
}
# Operators the NPU may not run: the cell still succeeds and says what stayed on the CPU and why.
PARTLY_OR_FULLY = {
    "bool_mask": (
        "partial",
        "partly delegated; on the CPU: aten_gt_tensor (Had torch.bool output that is not "
        "supported by TOSA-1.0+INT+int16+int4+u55.)",
    ),
    "gelu_layernorm": ("full", ""),
}
UNRESOLVED = (
    "export: model 'no_such_model' (no_such_package.models:Net): import path does not resolve: "
    "No module named 'no_such_package'"
)
BROKEN_VELA_TARGET = {
    "target": "ethos-u85-256",
    "system_config": "Test_U85_Broken",
    "vela": {"config": "tests/data/broken_vela.ini"},
}
BROKEN_VELA_CELL = "mnist/int8/ethos-u85-256/Test_U85_Broken/Shared_Sram"
VELA_FAILURE = (
    "Vela failed on partition 0: 'Error: Invalid configuration of arena_cache_size=-1 (must be >= 0)' "
    f"(reproducer: results/vela/{BROKEN_VELA_CELL}/repro/)"
)


def summary_rows(workdir: Path) -> dict[tuple[str, str], dict]:
    with open(workdir / "results" / "summary.csv", newline="") as f:
        return {(r["model"], r["target"]): r for r in csv.DictReader(f)}


def with_test_files(workdir: Path) -> Path:
    shutil.copytree(REPO / "tests" / "models", workdir / "tests" / "models", dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "data", workdir / "tests" / "data", dirs_exist_ok=True)
    shutil.copy(REPO / "tests" / "faults.py", workdir / "tests" / "faults.py")  # tests/models/faulty.py's faults
    return workdir


@pytest.fixture(scope="module")
def broken_sweep(tmp_path_factory, crashing_run, session_store):  # crashing_run first: its hang's wait overlaps this
    workdir = make_workdir(
        tmp_path_factory.mktemp("broken"),
        {
            "models": [
                GOOD,
                *({"name": n, "file": f"tests/models/{n}.py"} for n in [*BAD_MODELS, *PARTLY_OR_FULLY]),
                {"name": "no_such_model", "import": "no_such_package.models:Net", "inputs": [{"shape": [1]}]},
            ],
            "targets": ["ethos-u55-128", BROKEN_VELA_TARGET],
            "memory_modes": ["Shared_Sram"],
            "cpu_targets": ["cortex-m55"],
        },
    )
    with_test_files(workdir)
    return workdir, snakemake(workdir, env=session_store, check=False)  # the store: MNIST's stages


@pytest.fixture(scope="module")
def crashing_run(tmp_path_factory, session_store):
    """Models whose export job's process dies, beside a good one: the run, started and left running.
    Its hanging model holds it for a minute (the shortest limit Snakemake takes, below) while it
    uses little CPU, so the module starts it before the broken sweep and reads it after."""
    workdir = make_workdir(
        tmp_path_factory.mktemp("crashing"),
        {
            "models": [GOOD, *({"name": n, "file": f"tests/models/{n}.py"} for n in MAY_NOT_RECUR)],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
        },
    )
    with_test_files(workdir)
    # a 1-minute wall-clock limit for exports, so the hanging model is stopped soon
    command = snakemake_command(workdir, "--set-resources", "export_model:runtime=1")
    env = {**os.environ, **session_store}  # MNIST's stages from the store
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    yield workdir, proc
    if proc.poll() is None:  # a test failed before reading it
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def crashing_sweep(crashing_run):
    """The crashing run, ended: its working directory and the completed process."""
    workdir, proc = crashing_run
    stdout, stderr = proc.communicate(timeout=1800)
    return workdir, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_the_run_succeeds_and_every_cell_has_its_outcome(broken_sweep):
    workdir, proc = broken_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = summary_rows(workdir)
    assert len(rows) == (1 + len(BAD_MODELS) + len(PARTLY_OR_FULLY) + 1) * 2
    good = rows["mnist", "ethos-u55-128"]
    assert (good["status"], good["vela_cycles_total"]) == ("ok", "138824")
    header = workdir / "results/header/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/model_pte.h"
    assert "network_model_sec" in header.read_text()
    failed = {key for key, row in rows.items() if row["status"] == "failed"}
    assert failed == {
        *((m, t) for m in [*BAD_MODELS, "no_such_model"] for t in ("ethos-u55-128", "ethos-u85-256")),
        # the U85 config whose vela.ini Vela rejects fails every model that reaches it
        *((m, "ethos-u85-256") for m in ["mnist", *PARTLY_OR_FULLY]),
    }
    assert f"{len(rows) - len(failed)} of {len(rows)} cells ok" in proc.stderr
    assert "Failures are recorded: a rerun keeps them" in proc.stderr


@pytest.mark.parametrize("model", list(BAD_MODELS))
def test_a_broken_model_names_the_file_and_the_cause(broken_sweep, model):
    workdir, proc = broken_sweep
    for target in ("ethos-u55-128", "ethos-u85-256"):
        row = summary_rows(workdir)[model, target]
        assert row["status"] == "failed"
        assert row["reason"].startswith(BAD_MODELS[model]), row["reason"]
        # the failed job's output, to --forcerun, and its log
        assert (row["failed_output"], row["log"]) == (f"results/export/{model}/program.pt2", f"logs/export/{model}.log")
    terminal = BAD_MODELS[model].removeprefix("export: ")
    assert f"ethosweep: FAILED export_model {model}: {terminal}" in proc.stderr
    assert f"(log: logs/export/{model}.log)" in proc.stderr
    # under the table, once for both cells it fails, with the reason
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith(f"  failed: {model} [int8]")]
    assert line.startswith(
        f"  failed: {model} [int8] on 2 cells (ethos-u55-128 / Shared_Sram, ethos-u85-256 / Shared_Sram): "
        f"{BAD_MODELS[model]}"
    ), line


def test_a_failure_is_recorded_in_place_of_every_output_it_stops(broken_sweep):
    """Nothing half-written is left as if valid: every artifact of a failed chain is its failure
    record, never a program, and every reader asks for the record first."""
    from ethosweep.runtime.outcome import failure_of

    workdir, _ = broken_sweep
    cell = "forward_raises/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    for path in (
        "results/export/forward_raises/program.pt2",
        "results/lower/forward_raises/int8/u55/template.pte",
        "results/lower/forward_raises/int8/u55/tosa",  # a directory output: the record inside
        f"results/vela/{cell}/model.pte",
        f"results/header/{cell}/model_pte.h",
        "results/verify/forward_raises/int8/u55/verify.json",
    ):
        record = failure_of(workdir / path)
        assert record is not None and record["stage"] == "export", path
        assert record["reason"] == BAD_MODELS["forward_raises"].removeprefix("export: ")
    tosa = workdir / "results/lower/forward_raises/int8/u55/tosa"
    assert [p.name for p in tosa.iterdir() if not p.name.startswith(".")] == ["FAILED.json"]
    assert failure_of(workdir / f"results/vela/{U55_GOOD}/model.pte") is None


U55_GOOD = "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"


def test_a_recorded_failure_is_kept_by_a_plain_rerun(broken_sweep):
    workdir, _ = broken_sweep
    assert planned_jobs(workdir) == {}


def test_fixing_a_broken_model_reruns_its_chain_only(broken_sweep, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(broken_sweep[0], workdir, symlinks=True)
    (workdir / "tests/models/forward_raises.py").write_text(
        (workdir / "tests/models/forward_raises.py").read_text().replace("torch.ones(3, 3)", "torch.ones(4, 3)")
    )
    jobs = planned_jobs(workdir)
    # its export, its two TOSA profiles, its two cells, its CPU-only cell, and the end of the run
    assert {k: v for k, v in jobs.items() if k not in END_OF_RUN_JOBS} == {
        **model_chain(exports=1, profiles=2, cells=2),
        "plan_firmware": 2,
        "lower_cpu": 1,
    }
    proc = snakemake(workdir)
    rows = summary_rows(workdir)
    assert rows["forward_raises", "ethos-u55-128"]["status"] == "ok"
    assert rows["forward_raises", "ethos-u85-256"]["reason"].startswith("vela: Vela failed on partition 0")
    assert "ethosweep: FAILED export_model" not in proc.stderr


END_OF_RUN_JOBS = (
    "summarize_sweep",
    "summarize_cpu",
    "map_operators",
    "report_cells",
    "report_plots",
    "report_index",
    "all",
)


@pytest.mark.parametrize("model", list(MAY_NOT_RECUR))
def test_a_job_that_may_not_recur_fails_and_names_what_happened(crashing_sweep, model):
    workdir, proc = crashing_sweep
    assert proc.returncode != 0
    terminal = MAY_NOT_RECUR[model].removeprefix("export: ")
    assert f"ethosweep: FAILED export_model {model}: {terminal}" in proc.stderr
    assert not (workdir / f"results/export/{model}/program.pt2").exists()  # Snakemake removed its outputs


def test_a_job_killed_for_memory_names_the_memory_its_rule_declares(crashing_sweep):
    _, proc = crashing_sweep
    line = next(line for line in proc.stderr.splitlines() if line.startswith("ethosweep: FAILED export_model killed"))
    assert line.endswith(
        "MiB, the rule declares mem_mb=2000; raise it with --set-resources export_model:mem_mb=<MB>, "
        "or run fewer jobs at once) (log: logs/export/killed.log)"
    )


def test_a_run_stopped_by_a_job_that_may_not_recur_leaves_no_summary_and_retries_it(crashing_sweep):
    workdir, proc = crashing_sweep
    assert "the run stopped before its summary and report" in proc.stderr
    assert not (workdir / "results/summary.csv").exists() and not (workdir / "results/report/index.html").exists()
    # the good model's cell is done; the next run retries the two exports and what follows them
    jobs = planned_jobs(workdir)
    assert (jobs["export_model"], jobs["compile_with_vela"], jobs["summarize_sweep"]) == (2, 2, 1)


def test_cpu_only_cells_of_broken_models_are_named_in_their_summary(broken_sweep):
    workdir, _ = broken_sweep
    rows = {r["model"]: r for r in csv.DictReader(open(workdir / "results/cpu/summary.csv"))}
    assert len(rows) == 1 + len(BAD_MODELS) + len(PARTLY_OR_FULLY) + 1
    assert (rows["mnist"]["status"], rows["mnist"]["pte_bytes"]) == (
        "ok",
        str((workdir / "results/cpu/mnist/int8/cortex-m55/model.pte").stat().st_size),
    )
    for model, reason in BAD_MODELS.items():
        assert (rows[model]["status"], rows[model]["reason"][: len(reason)]) == ("failed", reason)


@pytest.mark.parametrize("model", list(PARTLY_OR_FULLY))
def test_operators_the_npu_cannot_run_stay_on_the_cpu_and_the_cell_says_why(broken_sweep, model):
    workdir, _ = broken_sweep
    row = summary_rows(workdir)[model, "ethos-u55-128"]
    delegation, reason = PARTLY_OR_FULLY[model]
    assert (row["status"], row["delegation"]) == ("ok", delegation)
    assert row["reason"].startswith(reason)


def test_an_import_path_that_does_not_resolve(broken_sweep):
    workdir, proc = broken_sweep
    assert summary_rows(workdir)["no_such_model", "ethos-u55-128"]["reason"] == UNRESOLVED


def test_a_vela_failure_fails_only_its_cell_with_velas_reason(broken_sweep):
    workdir, proc = broken_sweep
    row = summary_rows(workdir)["mnist", "ethos-u85-256"]
    assert (row["status"], row["reason"]) == ("failed", f"vela: {VELA_FAILURE}")
    assert (
        f"ethosweep: FAILED compile_with_vela {BROKEN_VELA_CELL}: {VELA_FAILURE} (log: "
        f"logs/vela/{BROKEN_VELA_CELL}.log)" in proc.stderr
    )
    # what the recorded failure cost is in its log, for the estimate of a run that redoes it
    from ethosweep.runtime.estimate import JOB_OVERHEAD_SECONDS, recorded_seconds

    assert recorded_seconds(str(workdir / f"logs/vela/{BROKEN_VELA_CELL}.log")) > JOB_OVERHEAD_SECONDS
    # Nothing half-written: each of the failed job's outputs is its failure record, none a program.
    from ethosweep.runtime.outcome import failure_of

    outputs = sorted((workdir / "results/vela" / BROKEN_VELA_CELL).glob("*.*"))
    assert [p.name for p in outputs] == ["compile.json", "model.pte", "per_layer.csv", "summary.json"]
    assert all(failure_of(p)["reason"] == VELA_FAILURE for p in outputs)
    # The lowering it shares with the good U85 cells is intact: only Vela failed.
    assert failure_of(workdir / "results/lower/mnist/int8/u85/template.pte") is None
    assert summary_rows(workdir)["gelu_layernorm", "ethos-u85-256"]["reason"].startswith("vela: Vela failed")


def test_a_vela_failure_leaves_a_reproducer_that_reproduces_it(broken_sweep):
    workdir, _ = broken_sweep
    repro = workdir / "results/vela" / BROKEN_VELA_CELL / "repro"
    assert sorted(p.name for p in repro.iterdir()) == ["README.txt", "command.sh", "partition_0.tosa", "vela.ini"]
    assert (repro / "partition_0.tosa").read_bytes() == (
        workdir / "results/lower/mnist/int8/u85/tosa/partition_0.tosa"
    ).read_bytes()
    assert (repro / "vela.ini").read_bytes() == (REPO / "tests/data/broken_vela.ini").read_bytes()
    command = (repro / "command.sh").read_text().splitlines()[-1]
    assert command.startswith("vela partition_0.tosa ") and "--config=./vela.ini" in command
    assert "--system-config=Test_U85_Broken" in command and "--memory-mode=Shared_Sram" in command
    # The README's command, exactly as written there, gives the same error outside the sweep.
    readme = (repro / "README.txt").read_text()
    command_in_readme = next(line.strip() for line in readme.splitlines() if line.strip().startswith("uv run sh "))
    assert command_in_readme == f"uv run sh results/vela/{BROKEN_VELA_CELL}/repro/command.sh"
    proc = typed(command_in_readme, workdir)
    assert proc.returncode != 0
    assert "Invalid configuration of arena_cache_size=-1 (must be >= 0)" in proc.stdout + proc.stderr


def test_a_vela_crash_is_named_kept_as_a_reproducer_and_fails_only_its_cells(sweep_copy):
    """Vela's native compiler crashing on a partition (here: a crafted TOSA in place of the
    mnist U55 profile's) fails only the cells compiled from it, with the signal's name, once it
    crashed again in a fresh process. The partition is one operator: no part of it compiles without
    crashing, so the search for the operator narrows nothing and Vela's own crash stands, saying why."""
    replace_partition_tosa(sweep_copy / "results/lower/mnist/int8/u55", zero_size_tosa(), edge=False)
    proc = snakemake(sweep_copy)  # a crash on its input is the cell's outcome: the run goes on
    cell = "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("ethosweep: FAILED")]
    reason = line.removeprefix(f"ethosweep: FAILED compile_with_vela {cell}: ").removesuffix(
        f" (log: logs/vela/{cell}.log)"
    )
    assert reason == (
        "Vela crashed (SIGSEGV) compiling partition 0 for ethos-u55-128 / Shared_Sram, twice in fresh processes; "
        "the search for the operator it refuses stopped: no part of the partition compiled without crashing (1 Vela "
        f"runs) (reproducer: results/vela/{cell}/repro/)"
    )
    rows = [r for r in csv.DictReader(open(sweep_copy / "results/summary.csv"))]
    failed = {(r["model"], r["target"]) for r in rows if r["status"] != "ok"}
    assert failed == {("mnist", "ethos-u55-128")}
    assert next(r for r in rows if r["model"] == "mnist" and r["status"] != "ok")["reason"] == f"vela: {reason}"
    # the same model's U85 cell (its own profile) and every other cell are unaffected
    u85 = next(r for r in rows if (r["model"], r["target"]) == ("mnist", "ethos-u85-256"))
    assert u85["status"] == "ok" and u85["vela_cycles_total"] == "46703"
    # the report names the crash, its signal and its reproducer too
    page = (sweep_copy / "results/report/cells" / f"{cell}.html").read_text()
    assert "Vela crashed (SIGSEGV)" in page and f"uv run sh results/vela/{cell}/repro/command.sh" in page

    repro = sweep_copy / "results/vela" / cell / "repro"
    assert sorted(p.name for p in repro.iterdir()) == ["README.txt", "command.sh", "partition_0.tosa", "vela.ini"]
    assert (repro / "partition_0.tosa").read_bytes() == zero_size_tosa()
    readme = (repro / "README.txt").read_text()
    assert readme.startswith(f"Vela 5.1.0 failed on this partition: {reason.split(' (reproducer')[0]}")
    # The README's command, exactly as written there, reproduces the crash outside the sweep.
    command = next(line.strip() for line in readme.splitlines() if line.strip().startswith("uv run sh "))
    ran = typed(command, sweep_copy)
    assert ran.returncode == 128 + signal.SIGSEGV or ran.returncode == -signal.SIGSEGV, (
        ran.returncode,
        ran.stderr[-500:],
    )


def test_a_reference_model_crash_on_one_model_leaves_every_other_models_summary_and_report(sweep_copy):
    """The TOSA reference model crashing (SIGSEGV, on a damaged flatbuffer in the edge program the
    verify stage runs) fails that verification only: the model's cells stay compiled and say why
    their numerics are unverified, with a reproducer; the summary, the report and every other
    model's verdict are made; `ethosweep failed` lists the verification. (The model's u85 cell,
    whose lowering is the u55 one's but for the compile specs, takes that verification: the same
    TOSA crashes alike. Here only the u55 edge program was damaged, so that is all it differs in.)"""
    from ethosweep.compile.artifacts import load_edge

    lowered = sweep_copy / "results/lower/mnist/int8/u55"
    tosa = load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes
    # a flatbuffer whose root table is 2 GB past its end: the reference model reads there and dies
    # (SIGSEGV). Truncated alone, it read the heap after the buffer, and once found an invalid graph.
    damaged = (0x7FFFFFF0).to_bytes(4, "little") + tosa[4:60]
    replace_partition_tosa(lowered, damaged, template=False)
    proc = snakemake(sweep_copy)
    assert proc.returncode == 0 and "Report: results/report/index.html" in proc.stderr
    rows = summary_rows(sweep_copy)
    mnist = rows["mnist", "ethos-u55-128"]
    assert (mnist["status"], mnist["numerics"]) == ("ok", "unverified")
    assert mnist["numerics_reason"] == (
        "verify: the TOSA reference model crashed (SIGSEGV) running partition 0 on sample 0, twice in fresh processes"
    )
    assert mnist["recorded_failures"] == "results/verify/mnist/int8/u55/verify.json"
    u85 = rows["mnist", "ethos-u85-256"]
    assert (u85["status"], u85["numerics"]) == ("ok", "unverified")
    assert u85["recorded_failures"] == mnist["recorded_failures"]
    same_as = "the u55 profile's verification (same quantized program, TOSA partitions and delegation)"
    assert u85["numerics_reason"] == f"{mnist['numerics_reason']} ({same_as})"
    assert all(r["numerics"] in PASSED for key, r in rows.items() if key[0] != "mnist"), rows
    repro = sweep_copy / "results/verify/mnist/int8/u55/repro"
    assert (repro / "partition_0.tosa").read_bytes() == damaged and (repro / "input_0.npy").exists()
    failed = typed("uv run ethosweep failed", sweep_copy)
    assert failed.stdout.split() == ["results/verify/mnist/int8/u55/verify.json"]


def test_a_fault_of_the_machine_is_retried_by_the_same_command_once_it_is_gone(tmp_path):
    """A model whose export runs out of memory for real (an allocation that fails): the job fails,
    nothing is recorded, the run stops before its summary. The memory back (the fault switched off
    outside the job's inputs), the same command, without --forcerun, completes the cell."""
    import faults

    work = make_workdir(
        tmp_path,
        {
            "models": [{"name": "faulty", "file": "tests/models/faulty.py"}],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
            "cpu_targets": [],
        },
    )
    with_test_files(work)
    failed = snakemake(work, env={faults.ENV: "MemoryError"}, check=False)
    assert failed.returncode != 0 and "the run stopped before its summary and report" in failed.stderr
    assert (
        "ethosweep: FAILED export_model faulty: model 'faulty' (tests/models/faulty.py): forward() on ModelInputs "
        "raised MemoryError" in failed.stderr
    )
    assert not (work / "results/export/faulty/program.pt2").exists()
    assert "cause: memory; the job fails; the next run retries it" in (work / "logs/export/faulty.log").read_text()
    again = snakemake(work)
    assert "1 of 1 cells ok" in again.stderr and planned_jobs(work) == {}
    # a fault of the model's own instead: recorded, and kept by the same command once "gone"
    (work / "tests/models/faulty.py").write_text((work / "tests/models/faulty.py").read_text() + "\n")
    snakemake(work, env={faults.ENV: "model error"})
    assert summary_rows(work)["faulty", "ethos-u55-128"]["status"] == "failed"
    assert planned_jobs(work) == {}  # kept until what it depends on changes


def test_a_vela_version_the_registry_does_not_have_fails_its_cells_only(tmp_path):
    """vela: {versions: [5.1.0, 9.9.9]}, where the registry (here a package index of our own, offline)
    has no 9.9.9: that version's cells fail naming it; the 5.1.0 cells are in the summary and the
    report, and the run ends as a run with failed cells does."""
    index = tmp_path / "index" / "ethos-u-vela"
    index.mkdir(parents=True)
    (index / "index.html").write_text("<html><body></body></html>")
    work = make_workdir(
        tmp_path / "w",
        {
            "models": [GOOD],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
            "cpu_targets": [],
            "vela": {"versions": ["5.1.0", "9.9.9"]},
        },
    )
    proc = snakemake(work, env={"UV_INDEX_URL": f"file://{index.parent}", "UV_NO_CACHE": "1"})
    assert proc.returncode == 0 and "1 of 2 cells ok" in proc.stderr
    rows = {r["vela_version"]: r for r in csv.DictReader(open(work / "results/summary.csv"))}
    assert (rows["5.1.0"]["status"], rows["5.1.0"]["vela_cycles_total"]) == ("ok", "138824")
    assert rows["9.9.9"]["status"] == "failed"
    assert (
        rows["9.9.9"]["reason"].startswith(
            "tools: could not resolve ethos-u-vela==9.9.9 from the registry: No solution found when resolving "
        )
        and "there is no version of ethos-u-vela==9.9.9" in rows["9.9.9"]["reason"]
    )
    assert "ethosweep: FAILED install_vela 9.9.9: could not resolve ethos-u-vela==9.9.9" in proc.stderr
    assert (work / "results/report/index.html").exists() and planned_jobs(work) == {}


def test_corrupt_artifacts_are_caught_by_the_stage_that_reads_them(tiny_sweep, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(tiny_sweep, work, symlinks=True)
    cell = "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    pte = work / "results/vela" / cell / "model.pte"
    pte.write_bytes(pte.read_bytes()[:1000])  # truncated after the vela stage wrote it
    proc = snakemake(work, "--forcerun", "bundle_program", check=False)
    assert proc.returncode != 0
    assert (
        f"ethosweep: FAILED bundle_program {cell}: results/vela/{cell}/model.pte is truncated: 1000 bytes, "
        "but the vela stage wrote 112736 bytes"
    ) in proc.stderr

    template = work / "results/lower/mnist/int8/u55/template.pte"
    template.write_bytes(b"\x00" * len(template.read_bytes()))  # same size, wrong bytes
    edge = work / "results/lower/mnist/int8/u55/edge.pt2"
    edge.write_bytes(edge.read_bytes()[:-10])
    proc = snakemake(work, "--forcerun", "compile_with_vela", "verify_numerics", check=False)
    assert proc.returncode != 0
    assert (
        f"ethosweep: FAILED compile_with_vela {cell}: results/lower/mnist/int8/u55/template.pte is corrupt"
        in proc.stderr
    )
    assert (
        "ethosweep: FAILED verify_numerics mnist/int8/u55: results/lower/mnist/int8/u55/edge.pt2 is truncated"
        in proc.stderr
    )


def test_a_config_that_does_not_parse_is_named_with_its_line(tmp_path):
    work = make_workdir(tmp_path, {"models": [GOOD]})
    (work / "config" / "config.yaml").write_text("models:\n  - {name: mnist, file: models/mnist.py\ntargets: [x]\n")
    proc = snakemake(work, "--dry-run", check=False)
    assert proc.returncode != 0
    assert (
        "ethosweep: the config does not parse: config/config.yaml, line 3, column 8: expected ',' or '}', but got "
        "':' (while parsing a flow mapping that starts at line 2, column 5)"
    ) in proc.stdout + proc.stderr


def test_invalid_config_errors_name_the_key(tmp_path):
    work = make_workdir(tmp_path, {"models": [GOOD], "seed": "zero"})
    proc = snakemake(work, "--dry-run", check=False)
    assert proc.returncode != 0
    # the parse error, on the terminal (the default profile's logger writes to stderr)
    assert "Invalid config: seed: 'zero' is not of type 'integer'" in proc.stdout + proc.stderr
    work = make_workdir(tmp_path, {"models": [GOOD], "targets": ["ethos-u55-128"], "memory_modes": ["Dedicated_Sram"]})
    proc = snakemake(work, "--dry-run", check=False)
    assert "Invalid config: the matrix is empty" in proc.stdout + proc.stderr


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_an_interrupted_run_leaves_nothing_taken_as_valid_and_resumes(tiny_sweep, session_store, tmp_path, how):
    work = make_workdir(tmp_path, TINY_CONFIG)
    proc = subprocess.Popen(
        snakemake_command(work),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **session_store},  # the stages before Vela's from the store: it is Vela interrupted
    )
    deadline = time.monotonic() + 300
    while not list((work / "logs").glob("vela/**/*.log")):  # interrupt while cells are being compiled
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1.0)
    if how == "SIGINT":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and its jobs, no chance to clean up
    proc.wait(timeout=120)

    if how == "SIGKILL":
        # Snakemake's lock outlives a killed run, by design; it says so, and the README's command
        # (exactly as written there) releases it
        locked = snakemake(work, check=False)  # a real run: a dry run does not take the lock
        assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
        assert "`uv run snakemake --unlock`" in (REPO / "README.md").read_text()
        unlocked = typed("uv run snakemake --unlock", work)
        assert unlocked.returncode == 0 and "Unlocked working directory" in unlocked.stdout + unlocked.stderr
    # Every cell not completed before the interrupt is still to do: a cell without its header
    # (written last by the cell's Vela job) plans that job; so does a cell interrupted after its
    # header was written but before Snakemake recorded the job as complete.
    planned = planned_jobs(work).get("compile_with_vela", 0)
    headers = len(list((work / "results/header").rglob("model_pte.h")))
    assert 6 - headers <= planned <= 6

    snakemake(work, env=session_store)
    assert not list(work.rglob("*.partial"))
    for cell in (
        "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram",
        "ds_cnn/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram",
    ):
        for artifact in ("vela/{}/model.pte", "header/{}/model_pte.h", "vela/{}/per_layer.csv"):
            path = artifact.format(cell)
            assert (work / "results" / path).read_bytes() == (tiny_sweep / "results" / path).read_bytes(), path
    assert all(r["status"] == "ok" for r in csv.DictReader(open(work / "results/summary.csv")))


def test_two_clean_runs_give_identical_artifacts(tiny_sweep, tmp_path):
    """.pte, BundleIO programs, TOSA, headers, Vela reports, the summary, the plots and the
    report page are byte-identical.

    The torch.export archives (.pt2) are not: each save records a random
    `serialization_id` and node provenance metadata holds Python object ids
    (`graph_id`). Their graphs and weights are identical, which is what is checked
    (for the lowered edge program: its graph, without node names, and every delegate's TOSA).
    """
    from ethosweep.compile.artifacts import load_quantized
    from ethosweep.compile.quantize import graph_digest

    work = make_workdir(tmp_path, TINY_CONFIG)
    snakemake(work, fresh=True)  # its own hash seed: no set order shared with the first run
    compared = {}
    for path in sorted((tiny_sweep / "results").rglob("*")):
        relative = path.relative_to(tiny_sweep)
        if path.suffix in (".pte", ".bpte", ".tosa", ".h", ".csv", ".svg", ".html") or path.name == "summary.json":
            assert (work / relative).read_bytes() == path.read_bytes(), relative
        elif path.name == "edge.pt2":
            assert edge_digest(work / relative) == edge_digest(path), relative
        elif path.suffix == ".pt2":
            assert graph_digest(load_quantized(work / relative)) == graph_digest(load_quantized(path)), relative
        else:
            continue
        compared[path.suffix] = compared.get(path.suffix, 0) + 1
    # every kind of artifact was compared, for every cell
    assert compared[".pte"] == 6 + 6 + 4  # each cell's .pte, each profile's template, each CPU-only cell's
    assert compared[".svg"] == 4 and compared[".html"] == 1 + 6  # the plots, the page and a detail per cell
    assert compared[".bpte"] == 6 and compared[".tosa"] == 6 + 1  # ds_cnn has two partitions
    # each cell's header, and one in each of the 8 deployment bundles whose cell fits its board
    fitting = [r for r in (tiny_sweep / "results/deploy").rglob("README.md") if "**Fit: fits**" in r.read_text()]
    assert 4 <= len(fitting) < 8  # the Alif E8's four, and the tiny board's that fit it (not mnist)
    assert compared[".h"] == 6 + len(fitting)


def edge_digest(path: Path) -> str:
    """The lowered edge program's graph and its delegates' payloads (the TOSA), hashed.

    Node names are left out: ExecuTorch's partitioner names the `getitem` nodes after its
    delegates in an order that varies between runs (`getitem` / `getitem_1` swap places).
    """
    import hashlib

    import torch

    from ethosweep.compile.artifacts import load_edge

    module = load_edge(path).module()
    index = {node: i for i, node in enumerate(module.graph.nodes)}
    digest = hashlib.sha256()
    for node in module.graph.nodes:
        args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: f"%{index[n]}")
        digest.update(f"{node.op} {node.target if node.op != 'get_attr' else ''} {args}\n".encode())
        if node.op == "get_attr" and node.target.startswith("lowered_module"):
            digest.update(getattr(module, node.target).processed_bytes)
    return digest.hexdigest()


def test_outputs_stay_inside_results_logs_and_benchmarks(tiny_sweep):
    # data: the test config's files; the links make the directory look like a checkout (conftest)
    allowed = {"results", "logs", "benchmarks", ".snakemake", "config", "models", "data", *CHECKOUT_LINKS}
    assert {p.name for p in tiny_sweep.iterdir()} <= allowed


# ---- the report of a sweep with failed cells -------------------------------------------------


def zip_listing(path: Path) -> str:
    return subprocess.run(["python3", "-m", "zipfile", "-l", str(path)], capture_output=True, text=True).stdout


def test_a_sweep_with_failed_cells_still_gets_its_report(broken_sweep, tmp_path):
    workdir, proc = broken_sweep
    assert "Report: results/report/index.html" in proc.stderr
    index = (workdir / "results/report/index.html").read_text()
    # it opens on what to pick, the failed models named there with their reason
    assert index.index('id="pick"') < index.index('id="all-cells"')
    pick = index[index.index('id="pick"') : index.index("<h2>Plots</h2>")]
    assert "failed: export: model &#39;syntax_error&#39; (tests/models/syntax_error.py): syntax error" in pick
    # every failed cell has its page: the reason, the log, and for Vela's failure the reproducer
    for model in BAD_MODELS:
        page = (
            workdir
            / "results/report/cells"
            / f"{model}/int8/ethos-u55-128/Ethos_U55_High_End_Embedded"
            / "Shared_Sram.html"
        ).read_text()
        assert 'class="verdict v-failed">failed</span>' in page and f"logs/export/{model}.log" in page
    vela_page = (workdir / "results/report/cells" / f"{BROKEN_VELA_CELL}.html").read_text()
    assert "Invalid configuration of arena_cache_size=-1" in vela_page
    assert f"uv run sh results/vela/{BROKEN_VELA_CELL}/repro/command.sh" in vela_page
    good = workdir / "results/report/cells/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram.html"
    assert "Vela: 138,824 cycles" in good.read_text()  # the good cells' pages are the usual ones
    # Snakemake's own report, as docs/report.md writes the command
    work = tmp_path / "w"
    shutil.copytree(workdir, work, symlinks=True)
    built = typed("uv run snakemake --report report.zip", work)
    assert built.returncode == 0, built.stderr[-3000:]
    listing = zip_listing(work / "report.zip")
    assert "index.html" in listing and "syntax_error/int8/ethos-u55-128" in listing


def test_fixing_a_failed_cell_reruns_it_alone_and_the_report_shows_it_ok(sweep_copy):
    (sweep_copy / "tests/data").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "tests/data/broken_vela.ini", sweep_copy / "tests/data/broken_vela.ini")
    config = sweep_copy / "config" / "config.yaml"
    broken_target = {
        "target": "ethos-u85-256",
        "system_config": "Test_U85_Broken",
        "vela": {"config": "tests/data/broken_vela.ini"},
    }
    changed = yaml.safe_load(config.read_text())
    changed["targets"] = [*changed["targets"], broken_target]
    config.write_text(yaml.safe_dump(changed, sort_keys=False))
    snakemake(sweep_copy)  # Vela's refusal is the two cells' recorded outcome
    cell = "mnist/int8/ethos-u85-256/Test_U85_Broken/Shared_Sram"
    index = (sweep_copy / "results/report/index.html").read_text()
    assert "failed in ethos-u85-256 / Shared_Sram: vela: Vela failed on partition 0: " in index
    assert 'v-failed">failed' in (sweep_copy / "results/report/cells" / f"{cell}.html").read_text()
    # the operator map says what Vela refused, beside what the partitioner kept on the CPU
    operators = csv.DictReader(open(sweep_copy / "results/operators.csv"))
    refused = [r for r in operators if r["where"] == "rejected by Vela"]
    assert [(r["operator"], r["family"], r["scheme"], r["held_back"]) for r in refused] == [
        ("a partition (in Vela)", "Ethos-U85", "int8", "add mnist")
    ]
    assert refused[0]["reason"].startswith("delegated by the partitioner, then refused by Vela: ")

    ini = sweep_copy / "tests/data/broken_vela.ini"
    ini.write_text(ini.read_text().replace("arena_cache_size=-1", "arena_cache_size=2097152"))
    # only the two cells of that config (mnist, add), and what reads them
    assert planned_jobs(sweep_copy) == {
        "compile_with_vela": 2,
        "bundle_program": 2,
        "verify_fallbacks": 2,
        "plan_firmware": 1,
        "report_cells": 1,
        "report_plots": 1,
        "report_index": 1,
        "map_operators": 1,  # reads the lowering and Vela's MACs
        "summarize_sweep": 1,
        "all": 1,
    }
    snakemake(sweep_copy)
    page = (sweep_copy / "results/report/cells" / f"{cell}.html").read_text()
    assert not re.search(r'class="[^"]*v-failed', page) and " cycles (" in page  # (the stylesheet names it)
    rows = {r["cell"]: r for r in csv.DictReader(open(sweep_copy / "results/summary.csv"))}
    assert rows[cell]["status"] == "ok"
    assert "rejected by Vela" not in (sweep_copy / "results/operators.csv").read_text()
