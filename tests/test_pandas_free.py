"""Snakemake's start without pandas (ethosweep.runtime.pandas_free): a no-op run of a finished
sweep imports no pandas, and the params rerun trigger still sees a changed param."""

from __future__ import annotations

import re
import subprocess

import yaml

from conftest import planned_jobs, snakemake_command


def imported(workdir, *args) -> tuple[subprocess.CompletedProcess, set[str]]:
    proc = subprocess.run(
        [snakemake_command(workdir, *args)[0], "-X", "importtime", *snakemake_command(workdir, *args)[1:]],
        capture_output=True,
        text=True,
    )
    return proc, set(re.findall(r"^import time:.*\| +(\S+)$", proc.stderr, re.M))


def test_a_no_op_run_imports_no_pandas_and_a_changed_param_still_reruns_its_jobs(sweep_copy):
    proc, modules = imported(sweep_copy)
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert "snakemake.persistence" in modules and "jsonschema" in modules  # params compared, config validated
    assert "pandas" not in modules
    config = sweep_copy / "config" / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["numerics"]["evaluation_samples"] = 400  # a param of the verify jobs
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    assert planned_jobs(sweep_copy).get("verify_numerics", 0) >= 1
