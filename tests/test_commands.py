"""Every command the README, the docs or a message tell a user to type works exactly as written.

Each command runs as typed (a shell, `uv run`) in a working directory that looks like a
checkout (conftest.make_workdir links the Snakefile, workflow/ and profiles/), without
the `--cores` the other tests' helper adds.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DOCS, REPO, job_stats, make_workdir, snakemake, typed

README = (REPO / "README.md").read_text()
# The README's two commands: set up and sweep, then the tests.
SWEEP_LINE = "python3 -m venv .uv && .uv/bin/pip install -q uv && .uv/bin/uv run snakemake --cores 8"
TEST_LINE = ".uv/bin/uv run pytest"
SETUP, SWEEP = SWEEP_LINE.rsplit(" && ", 1)

# Commands of the docs run by a test, and where.
TESTED = {
    ".uv/bin/uv run snakemake --cores 8": "test_commands.py",
    ".uv/bin/uv run pytest": ".ci/run (this very suite)",
    "uv run snakemake --report report.zip": "test_report.py::test_snakemakes_own_report_builds",
    "uv run ethosweep compare A/summary.csv B/summary.csv": "test_commands.py",
    "uv run snakemake --unlock": "test_failures.py::test_an_interrupted_run_leaves_nothing_taken_as_valid_and_resumes",
    "uv run sh results/vela/<cell>/repro/command.sh": "test_failures.py (a Vela error and a Vela crash)",
    "uv run ethosweep check-sdk": "test_commands.py",
    "uv run ethosweep picks --board alif-e8 --budget-ms 5": "test_commands.py",
    "uv run --extra zoos snakemake --cores 8 --configfile config/zoos/deployed.yaml": "test_config.py (the matrix "
    "it resolves to) and test_commands.py (planned task by task)",
    "uv run --extra zoos snakemake --cores 8 --configfile config/zoos/deployed.yaml --config 'tasks=[detection]'": (
        "test_commands.py"
    ),
    "uv run ethosweep cache": "test_cache.py (the store's commands)",
    "uv run ethosweep cache prune": "test_cache.py (the store's commands)",
    "uv run --with ethos-u-vela==5.2.0 snakemake -n": "test_toolchain.py (the Vela upgrade)",
    "uv run ethosweep compare results/summary.csv": "test_toolchain.py (Vela versions side by side)",
    "uv run snakemake --cores 8 --forcerun $(uv run ethosweep failed)": "test_end_of_run.py (retrying failures)",
    "uv run --project ../ethosweep snakemake --snakefile ../ethosweep/Snakefile --cores 8": "test_own_folder.py",
    # planned as written (a preset's full run takes an hour); its smoke subset runs in test_benchmarks.py
    "uv run snakemake --cores 8 --configfile config/zoos/mobile_classifiers.yaml": "test_commands.py (plan)",
    "uv run snakemake --cores 8 --configfile config/zoos/attention.yaml": "test_commands.py (plan)",
    "uv run snakemake --cores 8 --configfile config/zoos/segmentation.yaml": "test_commands.py (plan)",
    "uv run snakemake --cores 8 --configfile config/zoos/speech.yaml": "test_commands.py (plan)",
    "uv run --extra zoos snakemake --cores 8 --configfile config/zoos/detection.yaml": "test_commands.py (plan)",
    "uv run --extra zoos snakemake --cores 8 --configfile config/zoos/vision_transformers.yaml": (
        "test_commands.py (plan)"
    ),
    # with the flags the single-node test cluster needs (2 CPUs, no accounting database)
    "uv run --extra cluster snakemake --profile workflow/profiles/slurm": "test_slurm.py",
    "uv run pytest -m slurm": "test_slurm.py is that selection",
    "uv run python tests/slurm_cluster.py /tmp/cluster": "test_slurm.py starts the same cluster",
}
# Benchmarks take 5-40 minutes each: they are run by hand and their figures are in docs/performance.md;
# each one's --smoke mode runs to its verdict in test_benchmarks.py.
BENCHMARKS = re.compile(r"^uv run python perf/\S+\.py")
COMMAND = re.compile(r"^(?:\.uv/bin/)?uv run ")


def documented_commands() -> set[str]:
    """Every `uv run ...` command (and `.uv/bin/uv run ...`) the README and the docs show, in
    code blocks or inline code; a line of several commands joined by && counts each."""
    found = set()
    for text in DOCS.values():
        found |= set(re.findall(r"`((?:\.uv/bin/)?uv run [^`]+)`", text))
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                found |= {part.strip() for part in line.split("#")[0].split("&&") if COMMAND.match(part.strip())}
    return {" ".join(c.split()) for c in found}


def test_every_documented_command_is_run_by_a_test():
    untested = {c for c in documented_commands() if c not in TESTED and not BENCHMARKS.match(c)}
    assert not untested, f"documented commands no test runs: {sorted(untested)}"
    assert set(TESTED) <= documented_commands()


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    (block, *_) = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == [SWEEP_LINE, TEST_LINE]
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == TEST_LINE


def sets_up_uv(python_bin: Path, folder: Path) -> None:
    """The set-up part of the README's first line, pasted into a shell in `folder` whose python3 is
    the one in `python_bin` (a scratch HOME, no uv on PATH): it gives a working uv that runs this
    project's environment (left as it is: the suite runs in it)."""
    env = {"PATH": f"{python_bin}:/usr/bin:/bin", "HOME": str(folder / "home"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    missing = subprocess.run(["bash", "-c", "python3 -m uv --version; command -v uv"], env=env, capture_output=True)
    assert missing.returncode != 0 and b"No module named uv" in missing.stderr
    run = dict(env=env, capture_output=True, text=True, timeout=600, cwd=folder)
    installed = subprocess.run(["bash", "-c", SETUP], **run)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    version = subprocess.run(["bash", "-c", ".uv/bin/uv --version"], **run)
    assert version.returncode == 0 and version.stdout.startswith("uv "), version.stderr
    project = {**env, "UV_PROJECT": str(REPO)}
    ran = subprocess.run(["bash", "-c", ".uv/bin/uv run --no-sync snakemake --version"], **{**run, "env": project})
    assert ran.returncode == 0 and ran.stdout.startswith("9."), ran.stderr[-2000:]


def test_the_first_command_sets_up_uv_on_a_python_without_it(tmp_path):
    """A python3 with pip and no uv (a new virtual environment)."""
    subprocess.run([sys._base_executable, "-m", "venv", str(tmp_path / "python")], check=True)
    sets_up_uv(tmp_path / "python" / "bin", tmp_path)


DISTRIBUTION_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(
    not DISTRIBUTION_PYTHON.exists() or not list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED")),
    reason="no externally managed /usr/bin/python3 here (Debian's, Ubuntu's, Fedora's: PEP 668)",
)
def test_the_first_command_works_on_a_distributions_externally_managed_python(tmp_path):
    """Debian's own /usr/bin/python3 refuses `pip install` into itself (PEP 668: "externally-managed-
    environment"), as current Ubuntu and Fedora do: the set-up makes a venv of its own instead."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(DISTRIBUTION_PYTHON)
    refused = subprocess.run(
        ["bash", "-c", "python3 -m pip install uv"],
        env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr
    sets_up_uv(tmp_path / "bin", tmp_path)


def test_the_sweep_command_as_written(sweep_copy):
    (sweep_copy / "results" / "summary.csv").unlink()  # something to do: the end of the run
    # the set-up's .uv/bin/uv: here the uv of this environment (the set-up itself is tested above)
    (sweep_copy / ".uv" / "bin").mkdir(parents=True)
    (sweep_copy / ".uv" / "bin" / "uv").symlink_to(shutil.which("uv"))
    proc = typed(SWEEP, sweep_copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 of 6 cells ok" in proc.stderr


@pytest.mark.parametrize(
    ("preset", "models", "uv_run"),
    [
        ("mobile_classifiers", 9, "uv run"),
        ("attention", 3, "uv run"),
        ("segmentation", 2, "uv run"),
        ("speech", 3, "uv run"),
        # with the optional packages they need (ultralytics, timm): the command installs them
        ("detection", 3, "uv run --extra zoos"),
        ("vision_transformers", 2, "uv run --extra zoos"),
    ],
)
def test_a_zoo_preset_as_written_plans_its_whole_matrix(tmp_path, preset, models, uv_run):
    work = make_workdir(tmp_path / "w", {"models": [{"name": "mnist", "file": "models/mnist.py"}]})
    shutil.copytree(REPO / "config" / "zoos", work / "config" / "zoos")
    command = f"{uv_run} snakemake --cores 8 --configfile config/zoos/{preset}.yaml"
    proc = typed(f"{command} --dry-run", work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # every model on 3 NPUs in 2 schemes: lowered once per scheme and TOSA profile, Vela per cell
    jobs = job_stats(proc.stdout + proc.stderr)
    assert (jobs["lower_to_tosa"], jobs["compile_with_vela"], jobs["map_operators"]) == (models * 4, models * 6, 1)


def test_the_deployed_zoo_task_by_task_as_written(tmp_path):
    """The deployed zoo's detection models over the whole configuration space, planned: each lowered
    once per scheme and TOSA profile, Vela once per cell, every target and memory mode Vela accepts."""
    work = make_workdir(tmp_path / "w", {"models": [{"name": "mnist", "file": "models/mnist.py"}]})
    shutil.copytree(REPO / "config" / "zoos", work / "config" / "zoos")
    command = (
        "uv run --extra zoos snakemake --cores 8 --configfile config/zoos/deployed.yaml --config 'tasks=[detection]'"
    )
    proc = typed(f"{command} --dry-run", work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ethosweep: 1100 cells (11 models, 11 targets, 6 memory modes, 2 quantization schemes)" in proc.stderr
    jobs = job_stats(proc.stdout + proc.stderr)
    assert (jobs["lower_to_tosa"], jobs["compile_with_vela"]) == (11 * 2 * 2, 1100)


def test_check_sdk_as_the_run_suggests(sweep_copy):
    started = snakemake(sweep_copy, "--dry-run")
    assert "`uv run ethosweep check-sdk` how to get it" in started.stderr
    proc = typed("uv run ethosweep check-sdk", sweep_copy)
    # exit status 1: firmware cannot be built here; the table says what is missing and how to get it
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "ExecuTorch source checkout" in proc.stdout and "sdk.executorch_src" in proc.stdout


def test_compare_two_runs_as_written(sweep_copy, tiny_sweep, tmp_path):
    """`ethosweep compare` on two real runs: the tiny sweep, and a copy with one Vela option changed."""
    config = sweep_copy / "config" / "config.yaml"
    changed = yaml.safe_load(config.read_text())
    changed["targets"] = ["ethos-u55-128", {"target": "ethos-u85-256", "vela": {"optimise": "Size"}}]
    config.write_text(yaml.safe_dump(changed, sort_keys=False))
    snakemake(sweep_copy)
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    shutil.copy(tiny_sweep / "results/summary.csv", tmp_path / "A" / "summary.csv")
    shutil.copy(sweep_copy / "results/summary.csv", tmp_path / "B" / "summary.csv")

    proc = typed("uv run ethosweep compare A/summary.csv B/summary.csv", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "comparing B/summary.csv against A/summary.csv"
    # 10 summary rows; the two U85 cells changed (mnist, add), nothing else, no tool version
    assert lines[1] == "  8 cells unchanged, 2 changed, 0 only in A, 0 only in B"
    a_cycles = _cycles(tmp_path / "A/summary.csv", "mnist", "ethos-u85-256")
    b_cycles = _cycles(tmp_path / "B/summary.csv", "mnist", "ethos-u85-256")
    assert a_cycles != b_cycles
    mnist = next(line for line in lines if line.startswith("  mnist / int8 / ethos-u85-256"))
    assert f"Vela cycles {a_cycles:g} -> {b_cycles:g}" in mnist


def test_picks_as_written(sweep_copy):
    """`ethosweep picks`: the report's picks in the terminal, from summary.csv, with the numbers they
    rest on; as JSON, the fastest configuration of each model on the board, and the budget checked."""
    proc = typed("uv run ethosweep picks --board alif-e8 --budget-ms 5", sweep_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("alif-e8 (ethos-u55-128, NPU at 160 MHz)"), proc.stdout
    as_json = typed("uv run ethosweep picks --board alif-e8 --budget-ms 5 --json", sweep_copy)
    (section,) = json.loads(as_json.stdout)
    rows = [r for r in csv.DictReader(open(sweep_copy / "results/summary.csv")) if r["board"] == "alif-e8"]
    assert {p["model"] for p in section["picks"]} == {r["model"] for r in rows}
    for pick in section["picks"]:
        mine = [r for r in rows if r["model"] == pick["model"] and r["status"] == "ok" and r["fit"] == "fits"]
        if not mine:
            assert pick["verdict"] in ("does not fit", "failed"), pick
            continue
        # whole on the NPU first: a cell with a CPU part has only its NPU part timed
        fastest = min(mine, key=lambda r: (int(r["cpu_ops"]) > 0, float(r["board_inference_ms"])))
        assert f"fastest that fits: {fastest['memory_mode']}" in pick["text"], pick
        meets = float(fastest["board_inference_ms"]) <= 5
        untimed = int(fastest["cpu_ops"]) > 0  # within the budget on its NPU part: not said to meet it
        assert pick["verdict"] == ("misses budget" if not meets else "fits" if untimed else "meets budget"), pick
        assert f"  {pick['model']} " in proc.stdout
    # a task the run does not have is named, with the ones it has
    unknown = typed("uv run ethosweep picks --task nonesuch", sweep_copy)
    assert unknown.returncode == 2 and "no task ['nonesuch']" in unknown.stderr


def _cycles(summary: Path, model: str, target: str) -> float:
    import csv

    row = next(r for r in csv.DictReader(open(summary)) if (r["model"], r["target"]) == (model, target))
    return float(row["vela_cycles_total"])


def test_the_terminal_shows_progress_not_job_blocks_and_verbose_brings_them_back(sweep_copy):
    """The default profile's logger (src/snakemake_logger_plugin_ethosweep): a line per stage and
    tenth of the run, the table at the end; `--verbose` shows Snakemake's job blocks again."""
    compact = snakemake(sweep_copy, "--forcerun", "summarize_sweep")
    text = compact.stdout + compact.stderr
    assert "rule summarize_sweep:" not in text and "jobid:" not in text and "SNAKEMAKE\n=====" not in text
    progress = [line for line in text.splitlines() if line.startswith("ethosweep: [")]
    # a local run names what runs; a tenth reached between two jobs says the count alone
    assert progress and any(re.match(r"ethosweep: \[\s*\d+/\d+\s+\d+%\] running \w", line) for line in progress)
    assert re.match(r"ethosweep: \[\s*(\d+)/\1 100%\]", progress[-1])  # ends with every job done
    assert "6 of 6 cells ok" in text  # the end-of-run table
    assert len(text.splitlines()) < 60
    verbose = snakemake(sweep_copy, "--forcerun", "summarize_sweep", "--verbose")
    assert "rule summarize_sweep:" in verbose.stdout + verbose.stderr


def test_the_logger_plugin_loads_without_the_ethosweep_package():
    """Snakemake loads the plugin while it parses its arguments, before the workflow puts its own
    checkout's package on the path: an import of ethosweep there may find another checkout's (the
    compile-once benchmark runs an older one with this environment)."""
    import ast

    tree = ast.parse((REPO / "src/snakemake_logger_plugin_ethosweep/__init__.py").read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in top if isinstance(node, ast.ImportFrom)]
    assert not [name for name in names if name.split(".")[0] == "ethosweep"], names


def logger_off_a_terminal(monkeypatch):
    """ethosweep's logger writing to a pipe, its clock at minute 0: the handler, `at(minutes, record)`
    that emits a record then, and `progress(done, minutes)` that emits Snakemake's progress of a
    2,000-job run."""
    import io
    import logging
    from types import SimpleNamespace

    from snakemake_interface_logger_plugins.common import LogEvent

    import snakemake_logger_plugin_ethosweep as plugin

    settings = SimpleNamespace(quiet=None, debug_dag=False, verbose=False, dryrun=False, printshellcmds=False)
    monkeypatch.setattr(plugin, "HEARTBEAT_SECONDS", 0)  # its clock is the test's: `handler.tick()`
    handler = plugin.LogHandler(
        SimpleNamespace(**vars(settings), show_failed_logs=False, nocolor=True, stdout=False), None
    )
    handler.stream, handler.tty = io.StringIO(), False
    clock = [1000.0]
    monkeypatch.setattr(plugin.time, "monotonic", lambda: clock[0])
    handler.progress.started = handler.last_milestone_at = clock[0]

    def at(minutes: float, record: logging.LogRecord) -> None:
        clock[0] = 1000.0 + 60 * minutes
        handler.emit(record)

    def progress(done: int, minutes: float) -> None:
        record = logging.LogRecord("snakemake", logging.INFO, "", 0, "", None, None)
        record.event, record.done, record.total = LogEvent.PROGRESS, done, 2000
        at(minutes, record)

    return handler, at, progress


def test_a_long_run_off_a_terminal_says_where_it_is_every_ten_minutes(monkeypatch):
    """A pipe or a CI log gets a line per stage and tenth of the run; a zoo's first tenth takes an
    hour or more, so a long run also says where it is (and for how long it has run) every ten minutes.
    On SLURM the executor's line per submitted job comes in between (1,267 of them in a 1,000-cell
    sweep) and Snakemake reports no job start: the ten minutes still count from the last progress
    line, which says nothing of what runs rather than "running -"."""
    import logging

    handler, at, progress = logger_off_a_terminal(monkeypatch)

    def submitted(job: int, minutes: float) -> None:
        text = f"Job {job} has been submitted with SLURM jobid {job} (log: .snakemake/slurm_logs/rule_x/{job}.log)."
        at(minutes, logging.LogRecord("snakemake", logging.INFO, "", 0, text, None, None))

    progress(1, 1)  # the first tenth starts: a line
    progress(2, 5)  # within the tenth and ten minutes: none
    for minute in range(6, 12):
        submitted(minute, minute)  # printed as they come
    progress(3, 12)  # ten minutes after the last progress line: a line, with the time so far
    progress(4, 13)
    lines = [line for line in handler.stream.getvalue().splitlines() if not line.startswith("Job ")]
    assert len(lines) == 2 and lines[1] == "ethosweep: [   3/2000   0%]; 12 min so far", lines
    assert "so far" not in lines[0]
    assert handler.stream.getvalue().count("has been submitted") == 6


def test_a_long_job_is_said_while_nothing_else_happens(monkeypatch):
    """A crash's search in one cell of the deployed zoo ran 36 minutes with no job starting or
    ending, and no line came: the handler's own heartbeat says the status every ten minutes while
    jobs run, naming the longest-running job (its rule and cell) once it has run that long."""
    import logging

    from snakemake_interface_logger_plugins.common import LogEvent

    handler, at, progress = logger_off_a_terminal(monkeypatch)
    progress(1, 0)  # the first tenth starts: a line
    started = logging.LogRecord("snakemake", logging.INFO, "", 0, "", None, None)
    started.event, started.rule_name, started.jobid = LogEvent.JOB_INFO, "compile_with_vela", 7
    started.wildcards = {"model": "mobilevit_xs", "quant": "int8", "target": "ethos-u55-128", "vela_tag": ""}
    at(1, started)

    def tick(minutes: float) -> None:
        at(minutes, logging.LogRecord("snakemake", logging.DEBUG, "", 0, "", None, None))  # moves the clock
        handler.tick()

    tick(5)  # five minutes: nothing
    tick(11)  # ten since the last line (the stage's start), the job at ten minutes: said, and named
    tick(12)
    lines = handler.stream.getvalue().splitlines()
    assert lines[1:] == [
        "ethosweep: [   1/2000   0%] running compile_with_vela; cells compiled 0",
        "ethosweep: [   1/2000   0%] running compile_with_vela; cells compiled 0; 11 min so far; "
        "compile_with_vela mobilevit_xs/int8/ethos-u55-128 running for 10 min",
    ], lines


def test_a_long_run_says_about_how_long_is_left_at_the_pace_of_its_finished_jobs(monkeypatch):
    """The run's first line expects each job's seconds (workflow/rules/messages.smk hands them to the
    logger); the progress line then says the time left: what the unfinished jobs are expected to take,
    at the pace the finished ones kept against their expectation (here half of it: the estimate was
    twice too low, or the cores half as many)."""
    import logging

    from snakemake_interface_logger_plugins.common import LogEvent

    import snakemake_logger_plugin_ethosweep as plugin

    monkeypatch.setattr(plugin, "EXPECTED", {})
    plugin.expect({job: 60.0 for job in range(2000)})  # 2,000 jobs of a minute each: 2,000 min
    handler, at, progress = logger_off_a_terminal(monkeypatch)

    def finished(job: int, minutes: float) -> None:
        record = logging.LogRecord("snakemake", logging.INFO, "", 0, "", None, None)
        record.event, record.job_id = LogEvent.JOB_FINISHED, job
        at(minutes, record)

    for job in range(20):  # 1 % of the expected seconds: too few to tell the pace
        finished(job, job)
    progress(20, 20)
    for job in range(20, 200):  # 10 %, in 400 minutes: 3,600 minutes more at that pace
        finished(job, 2 * job)
    progress(200, 400)
    first, second = handler.stream.getvalue().splitlines()
    assert first == "ethosweep: [  20/2000   1%]; 20 min so far", first
    assert second == "ethosweep: [ 200/2000  10%]; 6 h 40 min so far, about 60 h 00 min left", second
