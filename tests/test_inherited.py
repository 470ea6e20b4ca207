"""Package versions are looked up once by the Snakemake process and inherited by its jobs,
but only by jobs running the same interpreter and checkout."""

import json
import os
import subprocess
import sys

from ethosweep.runtime import provenance

KEY = "ETHOSWEEP_INHERITED_TOOL_VERSIONS"
JOB = "import json; from ethosweep.runtime.provenance import tool_versions; print(json.dumps(tool_versions()))"


def job_sees(env_value: str | None, monkeypatch) -> dict:
    """What a job (a new process, as Snakemake starts them) records as its tool versions."""
    if env_value is None:
        monkeypatch.delenv(KEY, raising=False)
    else:
        monkeypatch.setenv(KEY, env_value)
    return json.loads(subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, check=True).stdout)


def test_jobs_inherit_the_versions_the_snakemake_process_looked_up(monkeypatch):
    monkeypatch.setenv(KEY, "")  # so that the test's own export is undone afterwards
    looked_up = job_sees(None, monkeypatch)
    assert looked_up["executorch"] and looked_up["vela"] and looked_up["torch"] != "not installed"

    provenance.export_tool_versions()  # what the Snakefile does at parse time
    record = json.loads(os.environ[KEY])
    assert record["value"] == looked_up and record["python"] == sys.executable
    # a job takes the inherited value (marked here, to tell it from a fresh look-up) ...
    record["value"]["torch"] = "as the Snakemake process found it"
    assert job_sees(json.dumps(record), monkeypatch)["torch"] == "as the Snakemake process found it"
    # ... unless it runs another interpreter (`--sdm conda`) or checkout: then it looks them up itself
    for key in ("python", "checkout"):
        assert job_sees(json.dumps({**record, key: "/elsewhere"}), monkeypatch) == looked_up
