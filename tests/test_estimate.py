"""About how long a run takes (ethosweep.runtime.estimate): from the CPU seconds jobs' logs recorded,
scheduled onto the cores as Snakemake schedules them."""

from __future__ import annotations

from ethosweep.runtime.estimate import (
    JOB_OVERHEAD_SECONDS,
    STAGE_SECONDS,
    Job,
    duration,
    estimate,
    measured_by_rule,
    recorded_seconds,
)


def log(tmp_path, name: str, cpu: float) -> str:
    path = tmp_path / f"{name}.log"
    done = f"ethosweep: done in {3 * cpu:.1f} s (CPU {cpu:.1f} s, process peak RSS 900 MiB)"
    path.write_text(f"ethosweep: lower_to_tosa {name}\n{done}\n")
    return str(path)


def test_a_run_is_its_longest_chain_or_its_work_over_the_cores(tmp_path):
    # two chains: export (10 s) -> lower (100 s), and export (10 s) -> lower (20 s), plus 40 Vela jobs of 1 s
    jobs = [
        Job("export_model", log(tmp_path, "e1", 10 - JOB_OVERHEAD_SECONDS), priority=50),
        Job("lower_to_tosa", log(tmp_path, "l1", 100 - JOB_OVERHEAD_SECONDS), priority=30, needs=[0]),
        Job("export_model", log(tmp_path, "e2", 10 - JOB_OVERHEAD_SECONDS), priority=50),
        Job("lower_to_tosa", log(tmp_path, "l2", 20 - JOB_OVERHEAD_SECONDS), priority=30, needs=[2]),
        *(Job("compile_with_vela", None, needs=[1]) for _ in range(40)),
    ]
    measured = measured_by_rule([("compile_with_vela", log(tmp_path, "v", 1 - JOB_OVERHEAD_SECONDS))])
    two = estimate(jobs, 2, measured)
    # the 100 s lowering ends at 110 s; the 40 Vela jobs after it on 2 cores: 20 s more
    assert two.seconds == 130 and two.job_seconds == 180 and two.measured == 44
    assert estimate(jobs, 1, measured).seconds == 180  # one core: everything in a row
    assert "every job's time measured here" in two.said() and two.said().startswith("about 2 min on 2 cores")


def test_a_chain_longer_than_the_runs_work_over_its_cores_starts_first():
    """The deployed zoo's shape, small: many models whose lowering is followed by their cells (Vela,
    above verification in the rules' order) and a short verification, and one model whose
    verification is a long chain. On 8 cores the rules' order leaves that chain for the end, and it
    bounds the run; chain_first starts it first. On 1 core the order cannot shorten the run, and the
    rules' order stays: the cells come before every verification."""
    from ethosweep.runtime.estimate import CHAIN_FIRST, chain_first, ends

    jobs, costs = [], []

    def add(stage, priority, seconds, needs=()):
        jobs.append(Job(stage, None, priority=priority, needs=list(needs)))
        costs.append(seconds)
        return len(jobs) - 1

    for model in range(12):
        export = add("export_model", 50, 1)
        lower = add("lower_to_tosa", 30, 100, [export])
        add("verify_numerics", 20, 2000 if model == 11 else 20, [lower])
        for _ in range(10):
            add("compile_with_vela", 25, 2, [lower])
    rules = [job.priority for job in jobs]
    long_chain = [i for i, job in enumerate(jobs) if costs[i] == 2000]
    priorities, seconds = chain_first(jobs, costs, 8, "compile_with_vela", first=50)
    # the long model's lowering and verification start first, after the exports (2 s): its 2,100 s
    assert seconds == max(ends(jobs, costs, 8, priorities)) == 2 + 2100
    assert (
        max(ends(jobs, costs, 8, rules)) > 2 + 2100
    )  # its lowering waited behind others (lowering ranks above verify)
    assert priorities[long_chain[0]] >= CHAIN_FIRST and priorities[long_chain[0] - 1] >= CHAIN_FIRST
    # every model's export still first (a broken model is said in a run's first seconds)
    exports = [p for job, p in zip(jobs, priorities) if job.stage == "export_model"]
    assert min(exports) > max(p for job, p in zip(jobs, priorities) if job.stage != "export_model")
    one_core, _ = chain_first(jobs, costs, 1, "compile_with_vela", first=50)
    assert one_core == rules


def test_an_unmeasured_stage_costs_its_median_on_this_machine():
    cold = estimate([Job("lower_to_tosa", None), Job("compile_with_vela", None, needs=[0])], 2, {})
    assert cold.seconds == STAGE_SECONDS["lower_to_tosa"] + STAGE_SECONDS["compile_with_vela"] and cold.measured == 0
    assert "the default matrix's stage costs on this project's machine" in cold.said()


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (3, 89, 600, 3600, 20_400)] == ["3 s", "89 s", "10 min", "1 h 00 min", "5 h 40 min"]


def test_a_model_not_run_in_this_folder_costs_what_it_cost_on_this_projects_machine():
    from ethosweep.runtime.estimate import KnownCosts, job_key

    model = {"name": "yolo", "import": "ethosweep.zoo.deployable:yolo", "kwargs": {"cfg": "yolov8n.yaml"}}
    known = KnownCosts(
        [
            {
                "rule": "lower_to_tosa",
                "fingerprint": job_key(model, {})[0],
                "wildcards": "int8/u55",
                "cpu_seconds": "300",
            },
            *(
                {"rule": "compile_with_vela", "fingerprint": job_key(model, {})[0], "wildcards": w, "cpu_seconds": s}
                for w, s in (("int8/ethos-u55-128/X/Shared_Sram", "10"), ("int8/ethos-u55-64/X/Shared_Sram", "30"))
            ),
        ]
    )
    lower = Job("lower_to_tosa", None, key=job_key(model, {"model": "yolo", "quant": "int8", "profile": "u55"}))
    cell = {
        "model": "yolo",
        "quant": "int8",
        "target": "ethos-u55-32",
        "system_config": "X",
        "memory_mode": "Sram_Only",
    }
    vela = Job("compile_with_vela", None, needs=[0], key=job_key(model, cell))
    about = estimate([lower, vela], 2, {}, known)
    # the lowering as measured; a configuration the table lacks at the median of the model's cells
    assert about.seconds == 300 + 20 + 2 * JOB_OVERHEAD_SECONDS and about.known == 2 and about.measured == 0
    assert "2 of 2 as the same jobs of these models cost on this project's machine" in about.said()
    # a scheme the table lacks: at the median of the model's cells in the schemes it has
    a16w8 = Job("compile_with_vela", None, key=job_key(model, {**cell, "quant": "a16w8"}))
    assert known.seconds(a16w8) == 20 + JOB_OVERHEAD_SECONDS
    # the same name for another model: no figures of the first
    other = Job("lower_to_tosa", None, key=job_key({**model, "kwargs": {"cfg": "yolo11n.yaml"}}, {"quant": "int8"}))
    assert estimate([other], 2, {}, known).known == 0


def test_a_runs_measured_costs_are_the_next_folders_estimate(tiny_sweep, tmp_path):
    """perf/measured_costs.py records what the tiny sweep's jobs cost, keyed as the workflow keys the
    jobs of a folder that has not run them (the models' definitions as the matrix builds them)."""
    import csv
    import subprocess
    import sys

    from conftest import REPO, TINY_CONFIG
    from ethosweep.matrix.config_file import resolve_models
    from ethosweep.matrix.expand import build_sweep
    from ethosweep.runtime.estimate import KnownCosts, job_key

    table = tmp_path / "costs.csv"
    done = subprocess.run(
        [sys.executable, str(REPO / "perf/measured_costs.py"), str(tiny_sweep), "--out", str(table)],
        capture_output=True,
        text=True,
        check=True,
    )
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert done.stdout.startswith(f"{len(rows):,} rows of ")
    lowerings = [r for r in rows if r["rule"] == "lower_to_tosa"]
    assert lowerings and {r["rule"] for r in rows} >= {"export_model", "quantize_model", "compile_with_vela"}
    # each row is its job's log: the stage's CPU seconds
    mnist = next(r for r in lowerings if (r["model"], r["wildcards"]) == ("mnist", "int8/u55"))
    log = tiny_sweep / "logs/lower/mnist/int8/u55.log"
    assert abs(float(mnist["cpu_seconds"]) + JOB_OVERHEAD_SECONDS - recorded_seconds(str(log))) < 0.01
    # a new folder's jobs of the same models find them, by the definitions the matrix builds
    config = {**TINY_CONFIG, **resolve_models(TINY_CONFIG)}
    sweep = build_sweep(config, base_dir=tiny_sweep, workflow_dir=REPO)
    wildcards = {"model": "mnist", "quant": "int8", "profile": "u55"}
    job = Job("lower_to_tosa", None, key=job_key(sweep.models["mnist"].as_params(), wildcards))
    assert KnownCosts(rows).seconds(job) == float(mnist["cpu_seconds"]) + JOB_OVERHEAD_SECONDS


def test_verification_costs_are_measured_on_one_sample_of_each_lowered_profile(tiny_sweep, tmp_path):
    """perf/verify_costs.py times one sample through each of verify's three paths (the NPU path on
    the TOSA reference model) and projects each verify job from it; a u85 profile whose verification
    the workflow took from the u55 one's costs nothing there either. Its rows go into the table the
    first line reads: a job's own CPU seconds where it ran."""
    import csv
    import json
    import os
    import sys

    import preloaded
    from conftest import REPO

    command = [sys.executable, str(REPO / "perf/verify_costs.py"), str(tiny_sweep), "--only", "mnist", "mnist_digits"]
    done = preloaded.run([*command, "--out", str(tmp_path / "costs.csv")], dict(os.environ))  # torch imported once
    assert done.returncode == 0, done.stderr[-3000:]
    header, *lines, total, written = done.stdout.strip().splitlines()
    rows = {tuple(line.split("\t")[:3]): dict(zip(header.split("\t"), line.split("\t"))) for line in lines}
    assert set(rows) == {("mnist", "int8", "u55"), ("mnist", "int8", "u85"), ("mnist_digits", "int8", "u55")}
    for (model, scheme, profile), row in rows.items():
        record = json.loads((tiny_sweep / f"results/verify/{model}/{scheme}/{profile}/verify.json").read_text())
        if "same_as" in record:  # the u55 profile's, where that one is
            record |= json.loads((tiny_sweep / record["same_as_report"]).read_text())
        assert int(row["samples"]) == record["samples"]  # what the job ran on: 500 held-out digits, 40 random
        if "same_as" in record:
            assert (float(row["projected s"]), row["NPU s"]) == (0.0, "-")
        else:
            assert float(row["GFLOPs"]) > 0 and float(row["NPU s"]) > 0
            assert float(row["projected s"]) > float(row["load s"]) + record["samples"] * float(row["NPU s"])
        assert float(row["job CPU s"]) > 0
    assert total.startswith("3 profiles: verification projected at ")
    with open(tmp_path / "costs.csv", newline="") as f:
        table = {(r["model"], r["wildcards"]): r for r in csv.DictReader(f)}
    assert written.startswith("3 verify rows into ") and set(table) == {(m, f"{s}/{p}") for m, s, p in rows}
    log = tiny_sweep / "logs/verify/mnist_digits/int8/u55.log"
    mnist_digits = float(table["mnist_digits", "int8/u55"]["cpu_seconds"])
    assert abs(mnist_digits + JOB_OVERHEAD_SECONDS - recorded_seconds(str(log))) < 0.01


def test_a_verify_jobs_time_limit_follows_its_measured_cost(tmp_path):
    """The default profile's 120 min stopped the zoo's largest verifications at `--cores 8` on 2 cores
    (docs/performance.md): a verify job's `runtime` is LIMIT_MARGIN times its measured CPU seconds times
    the jobs per core, at least the profile's default; `--set-resources` still sets it."""
    import os
    import re
    import subprocess

    import yaml

    from conftest import snakemake_command
    from ethosweep.runtime.estimate import LIMIT_MARGIN, KnownCosts, wall_clock_minutes

    model = {
        "name": "deeplabv3_resnet50",
        "task": "segmentation",
        "import": "ethosweep.zoo.deployable:segmenter",
        "kwargs": {"name": "deeplabv3_resnet50"},
        "inputs": [{"shape": [1, 3, 224, 224]}],
        "init": {"batchnorm": "calibrate"},
        "dataset": "random",
    }
    config = {"models": [model], "targets": ["ethos-u55-128", "ethos-u85-256"], "memory_modes": ["Shared_Sram"]}
    config.update(quantization=["int8"], boards=[], cpu_targets=[])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))

    def limits(*args):
        command = snakemake_command(
            tmp_path, "--configfile", str(tmp_path / "config.yaml"), "--dry-run", *args, cores=8
        )
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        out = done.stdout + done.stderr
        blocks = out.split("rule verify_numerics:")[1:]
        return {re.search(r"tosa_profile=(\w+)", b)[1]: int(re.search(r"runtime=(\d+)", b)[1]) for b in blocks}

    # the model's costliest int8 verification (DeepLabV3-ResNet50 is the only one past 5,000 s): both
    # profiles are bounded by it, the u85 one may not be able to take the u55 one's
    rows = KnownCosts.read().known.items()
    most = max(s for (rule, _, w), s in rows if rule == "verify_numerics" and w.startswith("int8/") and s > 5000)
    expected = wall_clock_minutes(most, 8 / os.cpu_count(), 120)
    assert expected >= LIMIT_MARGIN * most / 60 > 120
    assert limits() == {"u55": expected, "u85": expected}
    assert limits("--set-resources", "verify_numerics:runtime=7") == {"u55": 7, "u85": 7}


def test_the_order_benchmark_reaches_its_verdict():
    """perf/order.py on four of the default matrix's models: their real DAG, planned by the workflow
    (ETHOSWEEP_PLAN_TO: the jobs and costs written, none run), scheduled in the rules' order and in
    the order a run takes, on 2 to 16 cores."""
    import subprocess
    import sys

    from conftest import REPO

    done = subprocess.run(
        [sys.executable, str(REPO / "perf/order.py"), "--smoke"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].endswith("CPU-seconds (config.yaml, smoke)") and int(lines[0].split()[0]) > 4 * 8
    assert [line.split("\t")[0] for line in lines[2:6]] == ["2", "4", "8", "16"]
    assert lines[-1] == "verdict: the order a run takes is never longer than the rules' order"
