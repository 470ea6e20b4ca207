"""The workflow end to end on a tiny matrix: real outputs, and only stale work reruns."""

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import END_OF_RUN, REPO, U55_CELL, append, job_stats, model_chain, planned_jobs, snakemake
from ethosweep.runtime.io import read_json
from ethosweep.verify.verdicts import PASSED


def rows(workdir: Path, board: str = "alif-e8") -> dict[tuple, dict]:
    """Summary rows by (model, target, memory mode); a cell on several boards: the row for `board`."""
    with open(workdir / "results" / "summary.csv", newline="") as f:
        every = list(csv.DictReader(f))
    return {(r["model"], r["target"], r["memory_mode"]): r for r in every if r["board"] in ("", board)}


def set_config(workdir: Path, **changes) -> None:
    path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config.update(changes)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def test_summary_has_a_row_per_cell_with_real_numbers(tiny_sweep):
    table = rows(tiny_sweep)
    assert set(table) == {
        ("mnist", "ethos-u55-128", "Shared_Sram"),
        ("mnist", "ethos-u85-256", "Shared_Sram"),
        ("add", "ethos-u55-128", "Shared_Sram"),
        ("add", "ethos-u85-256", "Shared_Sram"),
        ("ds_cnn", "ethos-u55-128", "Shared_Sram"),
        ("mnist_digits", "ethos-u55-128", "Shared_Sram"),
    }
    mnist = table["mnist", "ethos-u55-128", "Shared_Sram"]
    # The seeds' figures for this cell, as Vela 5.1.0 reported them on its own (tests/data/vela/):
    # 1,135,872 MACs, 52,036 NPU cycles.
    assert (mnist["status"], mnist["delegation"], mnist["vela_macs"], mnist["vela_cycles_npu"]) == (
        "ok",
        "full",
        "1135872",
        "52036",
    )
    assert int(mnist["vela_cycles_total"]) == 138824 and mnist["vela_inference_ms"] == "0.2776"
    assert int(mnist["pte_bytes"]) == (tiny_sweep / "results/vela" / U55_CELL / "model.pte").stat().st_size
    assert (
        mnist["torch_version"],
        mnist["executorch_version"],
        mnist["vela_version"],
        mnist["tosa_tools_version"],
    ) == (
        "2.13.0",
        "1.5.1",
        "5.1.0",
        "2026.5.0",
    )
    assert (mnist["optimise"], mnist["vela_config"], mnist["seed"]) == ("Performance", "Arm/vela.ini", "0")
    # The U85 at 1 GHz with 256 MACs/cycle and weights in DRAM is faster than the U55-128 streaming from flash.
    assert int(table["mnist", "ethos-u85-256", "Shared_Sram"]["vela_cycles_total"]) < 138824 / 2


def test_a_partly_delegated_model_succeeds_and_names_what_stayed_on_the_cpu(tiny_sweep):
    ds_cnn = rows(tiny_sweep)["ds_cnn", "ethos-u55-128", "Shared_Sram"]
    assert (ds_cnn["status"], ds_cnn["delegation"], ds_cnn["partitions"]) == ("ok", "partial", "2")
    assert ds_cnn["cpu_operators"] == "aten_avg_pool2d_default x1"
    assert "on the CPU: aten_avg_pool2d_default" in ds_cnn["reason"]
    # Both partitions are compiled by Vela and counted: the cell's MACs are their sum.
    cell = "ds_cnn/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    vela = read_json(tiny_sweep / "results/vela" / cell / "summary.json")
    assert [p["nn_macs"] for p in vela["partitions"]] == [2656000, 768]
    assert int(ds_cnn["vela_macs"]) == 2656768
    # Each partition's TOSA is kept once for the profile, and the cell's .pte was compiled from it.
    lowered = read_json(tiny_sweep / "results/lower/ds_cnn/int8/u55/lower.json")
    compiled = read_json(tiny_sweep / "results/vela" / cell / "compile.json")
    assert [p["tosa_sha256"] for p in compiled["partitions"]] == [p["tosa_sha256"] for p in lowered["partitions"]]
    assert [
        (tiny_sweep / "results/lower/ds_cnn/int8/u55/tosa" / p["tosa"]).stat().st_size for p in lowered["partitions"]
    ] == [p["tosa_bytes"] for p in lowered["partitions"]]


def test_quantized_programs_are_per_model_scheme_and_tosa_profile(tiny_sweep):
    quantized = sorted(
        p.relative_to(tiny_sweep / "results/quantize").as_posix()
        for p in (tiny_sweep / "results/quantize").rglob("quantized.pt2")
    )
    assert quantized == [
        "add/int8/u55/quantized.pt2",
        "add/int8/u85/quantized.pt2",
        "ds_cnn/int8/u55/quantized.pt2",
        "mnist/int8/u55/quantized.pt2",
        "mnist/int8/u85/quantized.pt2",
        "mnist_digits/int8/u55/quantized.pt2",
    ]


def test_per_layer_report_accounts_for_every_mac(tiny_sweep):
    with open(tiny_sweep / "results/vela" / U55_CELL / "per_layer.csv", newline="") as f:
        layers = list(csv.DictReader(f))
    assert sum(int(layer["MAC Count"]) for layer in layers) == 1135872
    assert {layer["partition"] for layer in layers} == {"0"}


def test_every_job_has_a_log_and_a_benchmark(tiny_sweep):
    assert (
        (tiny_sweep / "logs/lower/mnist/int8/u55.log").read_text().startswith("ethosweep: lower_to_tosa mnist/int8/u55")
    )
    assert "Vela estimate: 138824 cycles total" in (tiny_sweep / "logs/vela" / f"{U55_CELL}.log").read_text()
    assert (tiny_sweep / "benchmarks/lower/mnist/int8/u55.tsv").read_text().startswith("s\th:m:s")
    assert (tiny_sweep / "benchmarks/vela" / f"{U55_CELL}.tsv").read_text().startswith("s\th:m:s")


def test_a_second_run_has_nothing_to_do(tiny_sweep):
    assert planned_jobs(tiny_sweep) == {}


def started(benchmark: Path) -> float:
    """When a job started: its benchmark file is written as it ends, with its wall time."""
    seconds = float(benchmark.read_text().splitlines()[-1].split("\t")[0])
    return benchmark.stat().st_mtime - seconds


def test_jobs_waiting_for_cores_start_in_pipeline_order(tiny_sweep):
    """PRIORITY in common.smk: every model's export starts before any quantization (so a broken
    model is reported in a run's first seconds). Without it Snakemake prefers the jobs with the
    largest inputs: this sweep exported ds_cnn after mnist's whole chain. mnist_digits is left out:
    its export waits for its training."""
    exports = [started(tiny_sweep / f"benchmarks/export/{model}.tsv") for model in ("mnist", "add", "ds_cnn")]
    quantizations = [started(f) for f in (tiny_sweep / "benchmarks/quantize").rglob("*.tsv")]
    assert len(quantizations) == 6
    assert max(exports) < min(quantizations)


def vela_and_what_follows(cells: int, runners: int, profiles: int) -> dict[str, int]:
    """The jobs planned when `cells` cells need Vela again and nothing before it: each cell's Vela
    job (the .pte and its C header) and BundleIO program, the plans of the `runners` firmware
    runners serving them, the fallback check of the `profiles` (model, scheme, profile) they belong
    to (verify_fallbacks reads their compile records), and the matrix-wide summary and report jobs."""
    return {
        "compile_with_vela": cells,
        "bundle_program": cells,
        "verify_fallbacks": profiles,
        "plan_firmware": runners,
        **END_OF_RUN,
    }


def test_adding_a_memory_mode_runs_only_the_new_cells(sweep_copy):
    set_config(sweep_copy, memory_modes=["Shared_Sram", "Sram_Only"])
    # New cells only, and for them only Vela and what follows: lowering and verification are
    # per TOSA profile, and these profiles are lowered and verified already; a runner plan for
    # each new (target, system config, Sram_Only).
    assert planned_jobs(sweep_copy) == vela_and_what_follows(cells=4, runners=2, profiles=4)
    snakemake(sweep_copy)
    # The report's advice compares the memory modes of this very sweep, with their numbers.
    shared, sram_only = (rows(sweep_copy)["mnist", "ethos-u55-128", mode] for mode in ("Shared_Sram", "Sram_Only"))
    fewer = int(shared["vela_cycles_total"]) / int(sram_only["vela_cycles_total"])
    detail = (sweep_copy / "results/report/cells" / f"{U55_CELL}.html").read_text()
    assert (
        f"In this sweep Sram_Only takes {int(sram_only['vela_cycles_total']):,} cycles ({fewer:.1f}× fewer), with "
        f"{float(sram_only['vela_sram_kib']):.1f} KiB of SRAM for tensors"
    ) in detail


def test_adding_a_target_of_a_lowered_profile_runs_only_its_cells(sweep_copy):
    set_config(sweep_copy, targets=["ethos-u55-128", "ethos-u85-256", "ethos-u65-256"])
    # U65 lowers to the U55 profile's TOSA: mnist and add get a cell each, compiled by Vela from
    # the u55 lowering (ds_cnn and mnist_digits are excluded from the cross product)
    assert planned_jobs(sweep_copy) == vela_and_what_follows(cells=2, runners=1, profiles=2)
    snakemake(sweep_copy)
    # The U65 cells were compiled from the U55 profile's quantized program and lowering.
    lowered = read_json(sweep_copy / "results/lower/mnist/int8/u55/lower.json")
    u65 = read_json(sweep_copy / "results/vela/mnist/int8/ethos-u65-256/Ethos_U65_High_End/Shared_Sram/compile.json")
    assert u65["template_sha256"] == lowered["template_sha256"]
    assert sorted(p.name for p in (sweep_copy / "results/quantize/mnist/int8").iterdir()) == ["u55", "u85"]
    row = rows(sweep_copy)["mnist", "ethos-u65-256", "Shared_Sram"]
    assert row["status"] == "ok" and row["numerics"] == "identical" and int(row["vela_macs"]) == 1135872


def test_editing_a_model_file_reruns_only_that_models_chain(sweep_copy):
    # models/mnist.py is the source of two models: mnist (2 cells) and mnist_digits (trained, 1 cell).
    append(sweep_copy / "models" / "mnist.py", "\n# edited\n")
    assert planned_jobs(sweep_copy) == {
        "train_model": 1,
        **model_chain(exports=2, profiles=3, cells=3),
        "bundle_program": 3,
        "bundle_deployment": 2 * 2,
        "plan_firmware": 2,
        "lower_cpu": 2,
        "summarize_cpu": 1,
        **END_OF_RUN,
    }


def test_changing_a_vela_option_reruns_only_the_affected_cells(sweep_copy):
    set_config(sweep_copy, targets=["ethos-u55-128", {"target": "ethos-u85-256", "vela": {"optimise": "Size"}}])
    # only the U85 cells' Vela runs (and what follows): the u85 lowering is not redone
    assert planned_jobs(sweep_copy) == vela_and_what_follows(cells=2, runners=1, profiles=2)
    snakemake(sweep_copy)
    table = rows(sweep_copy)
    assert table["mnist", "ethos-u85-256", "Shared_Sram"]["optimise"] == "Size"
    assert table["mnist", "ethos-u55-128", "Shared_Sram"]["vela_cycles_total"] == "138824"  # untouched
    compiled = read_json(
        sweep_copy / "results/vela/mnist/int8/ethos-u85-256/Ethos_U85_SYS_DRAM_Mid/Shared_Sram/compile.json"
    )
    assert "--optimise=Size" in compiled["vela_flags"]
    assert planned_jobs(sweep_copy) == {}


def test_editing_a_stages_library_code_reruns_that_stage(sweep_copy):
    # Run against a copy of the package so the edit stays out of the repository.
    package = sweep_copy / "pkg"
    shutil.copytree(REPO / "src" / "ethosweep", package / "ethosweep", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": str(package)}
    assert planned_jobs(sweep_copy, env=env) == {}
    append(package / "ethosweep" / "deploy" / "header.py", "\n# an edit to the header stage\n")
    # the headers are the last step of each cell's Vela job (one job per cell instead of two:
    # docs/how-it-works.md), so every cell's Vela job reruns, and what follows from its .pte:
    # bundles, firmware plans, report pages, and the deployment bundles that carry the headers
    # (4 U55 cells on 2 boards)
    assert planned_jobs(sweep_copy, env=env) == {
        "compile_with_vela": 6,
        "bundle_program": 6,
        "verify_fallbacks": 6,
        "plan_firmware": 2,
        "report_cells": 1,
        "bundle_deployment": 8,
        "summarize_sweep": 1,
        "report_plots": 1,
        "report_index": 1,
        "map_operators": 1,  # reads the lowering and Vela's MACs
        "all": 1,
    }


def test_lint_is_clean():
    proc = snakemake(REPO, "--lint", check=False)
    assert proc.returncode == 0 and "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_the_trained_digits_model_is_verified_on_held_out_data(tiny_sweep):
    row = rows(tiny_sweep)["mnist_digits", "ethos-u55-128", "Shared_Sram"]
    assert row["numerics"] == "identical" and row["data"].startswith("500 held-out samples of digits")
    # the quantization's question, on real data: its top-1 agreement with float shown within 0.99
    assert row["vs_float"] == "ok" and row["vs_float_reason"].startswith("shown within tolerance: top-1 agreement")
    assert float(row["top1_float"]) >= 0.95
    assert float(row["top1_npu"]) >= 0.95 and float(row["top1_float"]) - float(row["top1_npu"]) < 0.02
    assert float(row["agreement_npu_vs_float"]) >= 0.99
    # The TOSA reference model (the NPU's functional model) against quantized PyTorch: within 1 step.
    assert float(row["max_error_steps"]) <= 1
    trained = read_json(tiny_sweep / "results/train/mnist_digits/train.json")
    assert trained["train_samples"] + trained["held_out_samples"] == 1797 and trained["held_out_top1"] >= 0.95


def test_every_cell_is_verified_against_its_own_tosa(tiny_sweep):
    for row in rows(tiny_sweep).values():
        assert row["numerics"] in PASSED, row
        assert float(row["max_error_steps"]) <= 1
    # without a dataset: the example inputs plus random ones (numerics.random_samples, fixed before
    # looking), and what quantization costs against float not judged
    mnist = rows(tiny_sweep)["mnist", "ethos-u85-256", "Shared_Sram"]
    assert mnist["data"].startswith("the example inputs and 39 random inputs") and mnist["top1_float"] == ""
    assert mnist["vs_float"] == "not judged" and "give it a `dataset`" in mnist["vs_float_reason"]


def test_bundleio_programs_carry_real_inputs_and_expected_outputs(tiny_sweep):
    from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program

    cell = "mnist_digits/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    bundled = deserialize_from_flatbuffer_to_bundled_program(
        (tiny_sweep / "results/bundle" / cell / "model.bpte").read_bytes()
    )
    (suite,) = bundled.method_test_suites
    assert suite.method_name == "forward" and len(suite.test_cases) == 4
    data = __import__("torch").load(tiny_sweep / "results/verify/mnist_digits/int8/u55/bundle_io.pt", weights_only=True)
    assert len(data["inputs"]) == 4 and data["inputs"][0][0].shape == (1, 1, 28, 28)
    assert float(data["inputs"][0][0].max()) > 0.5  # a digit, not a tensor of ones
    # MNIST's u85 verification is its u55 one's (a record naming it): its cells carry the same cases
    suites = [
        deserialize_from_flatbuffer_to_bundled_program(path.read_bytes()).method_test_suites[0]
        for path in sorted((tiny_sweep / "results/bundle/mnist/int8").glob("*/*/*/model.bpte"))
    ]
    assert len(suites) == 2 and len(suites[0].test_cases) == 4 and suites[0].test_cases == suites[1].test_cases
    assert "same_as_report" in read_json(tiny_sweep / "results/verify/mnist/int8/u85/verify.json")


def test_boards_get_a_fit_verdict_with_margins_on_real_numbers(tiny_sweep):
    alif = rows(tiny_sweep, "alif-e8")["mnist", "ethos-u55-128", "Shared_Sram"]
    lowered = read_json(tiny_sweep / "results/vela" / U55_CELL / "compile.json")
    vela = read_json(tiny_sweep / "results/vela" / U55_CELL / "summary.json")["cell"]
    # Alif E8: the .pte in MRAM (5632 KiB), Vela's SRAM use and the runner's planned buffers in SRAM (4096 KiB)
    assert alif["fit"] == "fits"
    sram_need = vela["sram_memory_used"] + lowered["planned_buffer_bytes"] / 1024
    assert float(alif["fit_sram_margin_kib"]) == pytest.approx(4096 - sram_need, abs=0.1)
    assert float(alif["fit_flash_margin_kib"]) == pytest.approx(5632 - lowered["pte_bytes"] / 1024, abs=0.1)
    # Vela's 138,824 cycles at the E8 RTSS-HE's 160 MHz, not the system config's 500 MHz
    assert float(alif["board_inference_ms"]) == pytest.approx(138824 / 160e3, abs=1e-3)

    tiny = rows(tiny_sweep, "tiny-board")["mnist", "ethos-u55-128", "Shared_Sram"]
    assert tiny["fit"] == f"does not fit: SRAM needs {sram_need:.1f} KiB, has 16 KiB"
    assert float(tiny["fit_sram_margin_kib"]) < 0
    add = rows(tiny_sweep, "tiny-board")["add", "ethos-u55-128", "Shared_Sram"]
    assert add["fit"] == "fits"


def test_deployment_bundles_hold_what_goes_on_the_board(tiny_sweep):
    bundle = tiny_sweep / "results/deploy/alif-e8" / U55_CELL
    assert (bundle / "model_pte.h").read_bytes() == (
        tiny_sweep / "results/header" / U55_CELL / "model_pte.h"
    ).read_bytes()
    cmake = (bundle / "ethosweep.cmake").read_text()
    assert 'set(ETHOSU_TARGET_NPU_CONFIG "ethos-u55-128"' in cmake and 'set(MEMORY_MODE "Shared_Sram"' in cmake
    readme = (bundle / "README.md").read_text()
    assert "**Fit: fits**" in readme and "Seed 000's steps" in readme
    assert (
        rows(tiny_sweep, "alif-e8")["mnist", "ethos-u55-128", "Shared_Sram"]["deploy"]
        == f"results/deploy/alif-e8/{U55_CELL}"
    )
    # a cell that does not fit its board: the bundle says so, and holds no program
    small = tiny_sweep / "results/deploy/tiny-board" / U55_CELL
    assert not (small / "model_pte.h").exists() and (small / "ethosweep.cmake").exists()
    assert "`model_pte.h`: not written: the cell does not fit tiny-board" in (small / "README.md").read_text()


def test_headers_only_in_bundles_write_none_per_cell(sweep_copy):
    """`headers: bundles` (a zoo sweep, where a header per cell would fill the disk): no
    results/header/, nothing compiled again, and the bundle of a cell that fits its board still
    holds the .pte's header, rendered from the .pte."""
    from ethosweep.deploy.c_array import render_header

    shutil.rmtree(sweep_copy / "results/header")
    set_config(sweep_copy, headers="bundles")
    planned = planned_jobs(sweep_copy)
    # only the end of the run: its summary no longer names headers
    assert planned == {"summarize_sweep": 1, "report_plots": 1, "report_index": 1, "all": 1}, planned
    snakemake(sweep_copy)
    assert not (sweep_copy / "results/header").exists()
    row = rows(sweep_copy)["mnist", "ethos-u55-128", "Shared_Sram"]
    assert row["status"] == "ok" and row["header"] == ""
    pte = f"results/vela/{U55_CELL}/model.pte"
    symbol = "mnist_int8_ethos_u55_128_ethos_u55_high_end_embedded_shared_sram_pte"
    header = (sweep_copy / "results/deploy/alif-e8" / U55_CELL / "model_pte.h").read_text()
    assert header == render_header((sweep_copy / pte).read_bytes(), symbol, origin=pte)
    assert f"const uint8_t {symbol}[" in header


def test_a_real_lowering_discrepancy_is_flagged_in_the_summary_with_its_layer(sweep_copy):
    """Half of conv2's weights negated in mnist_digits' TOSA, both in what the cells compile and in
    what the verify stage runs: the summary row says flagged, and where."""
    from ethosweep.compile.artifacts import load_edge
    from tosa_edit import negate_first_conv2d_weights, replace_partition_tosa

    lowered = sweep_copy / "results/lower/mnist_digits/int8/u55"
    tosa, _ = negate_first_conv2d_weights(load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes)
    replace_partition_tosa(lowered, tosa)
    assert planned_jobs(sweep_copy)["verify_numerics"] == 1
    snakemake(sweep_copy)
    row = rows(sweep_copy)["mnist_digits", "ethos-u55-128", "Shared_Sram"]
    assert (row["status"], row["numerics"], row["numerics_layer"]) == ("ok", "flagged", "conv2d_1")
    assert row["numerics_reason"].startswith(
        "layer conv2d_1 (conv2d + relu, conv2) computes something else than the quantized model:"
    )
    assert float(row["top1_npu"]) < float(row["top1_quantized"])
    assert all(r["numerics"] in PASSED for key, r in rows(sweep_copy).items() if key[0] != "mnist_digits")


def test_a_cell_compiled_from_another_tosa_than_the_verified_one_is_unverified(sweep_copy):
    from ethosweep.compile.artifacts import load_edge
    from tosa_edit import negate_first_conv2d_weights, replace_partition_tosa

    lowered = sweep_copy / "results/lower/mnist/int8/u55"
    tosa, _ = negate_first_conv2d_weights(load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes)
    replace_partition_tosa(lowered, tosa, template=False)  # the verify stage sees other TOSA than the cells
    snakemake(sweep_copy)
    row = rows(sweep_copy)["mnist", "ethos-u55-128", "Shared_Sram"]
    assert (row["status"], row["numerics"]) == ("ok", "unverified")
    assert row["numerics_reason"] == "the cell's TOSA differs from the verified TOSA"


def test_the_test_config_plans_in_place_as_the_workflow_catalog_runs_it():
    """`.test/` is the Snakemake Workflow Catalog's test config: the tests' tiny matrix (conftest),
    runnable in place with --directory .test."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--directory", ".test", "--cores", "2", "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 cells (4 models, 2 targets, 1 memory mode, 1 quantization scheme)" in proc.stderr
    jobs = job_stats(proc.stdout + proc.stderr)
    assert (jobs["export_model"], jobs["compile_with_vela"], jobs["summarize_sweep"]) == (4, 6, 1)


def test_an_exploratory_sweep_leaves_verification_out_and_says_so(tmp_path, session_store):
    """numerics.verify: false: no verify job; the summary and the report say "not verified", never a verdict."""
    from conftest import make_workdir

    config = {
        "models": [{"name": "mnist", "file": "models/mnist.py"}],
        "targets": ["ethos-u55-128"],
        "memory_modes": ["Shared_Sram"],
        "numerics": {"verify": False},
    }
    work = make_workdir(tmp_path, config)
    assert "verify_numerics" not in planned_jobs(work)
    proc = snakemake(work, env=session_store)
    (row,) = csv.DictReader(open(work / "results/summary.csv", newline=""))
    assert (row["status"], row["numerics"], row["vela_cycles_total"]) == ("ok", "not verified", "138824")
    assert "numerics: not verified (numerics.verify is off: an exploratory sweep)" in proc.stderr
    index = (work / "results/report/index.html").read_text()
    assert "numerics not verified (numerics.verify is off: an exploratory sweep)" in index
    assert not (work / "results/verify").exists()
