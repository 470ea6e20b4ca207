"""A job's script process: ethosweep's preamble gives stage.py the items Snakemake's own gives,
without importing Snakemake (ethosweep.runtime.job_script)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# what stage.py's client reads of its `snakemake` object, and whether the snakemake package was imported
BODY = """
import json, sys
from ethosweep.runtime.job_script import job_items
print(json.dumps({
    "items": job_items(snakemake),
    "rule": snakemake.rule,
    "inputs": [str(f) for f in snakemake.input],
    "outputs": [str(f) for f in snakemake.output],
    "first_output": str(snakemake.output[0]),
    "stage": snakemake.params.stage,
    "reads_failures": list(snakemake.params.get("reads_failures", ())),
    "mem_mb": snakemake.resources.get("mem_mb"),
    "wildcards": dict(snakemake.wildcards.items()),
    "snakemake imported": any(m == "snakemake" or m.startswith("snakemake.") for m in sys.modules),
}))
"""


def named(cls, values, names):
    """A Snakemake Namedlist as a job has it: a named item is a slice of its values."""
    items = cls(values)
    for name, (start, end) in names.items():
        items._set_name(name, start, end)
    return items


def job_arguments(tmp_path):
    from snakemake.iocontainers import InputFiles, Log, Namedlist, OutputFiles, Params, Wildcards

    inputs = named(
        InputFiles,
        [str(tmp_path / "template.pte"), str(tmp_path / "a.json"), str(tmp_path / "b.json")],
        {"template": (0, None), "records": (1, 3)},
    )
    outputs = named(
        OutputFiles, ["results/x/model.pte", "results/x/summary.json"], {"pte": (0, None), "summary": (1, None)}
    )
    params = named(
        Params,
        [
            ["ethosweep.vela.compile:compile_cell", "ethosweep.deploy.header:write_header"],
            ["records"],
            {"optimise": "Size"},
        ],
        {"stage": (0, None), "reads_failures": (1, None), "vela": (2, None)},
    )
    wildcards = named(Wildcards, ["mnist", "int8"], {"model": (0, None), "scheme": (1, None)})
    resources = named(Namedlist, [1, 1500], {"_cores": (0, None), "mem_mb": (1, None)})
    log = Log(["logs/vela/x.log"])
    return inputs, outputs, params, wildcards, 1, resources, log, {}, "compile_with_vela"


def run_script(tmp_path, script) -> dict:
    from snakemake.script import PythonScript
    from snakemake.sourcecache import LocalSourceFile

    from ethosweep.runtime.job_script import light_preamble

    assert light_preamble()
    preamble = PythonScript.generate_preamble(
        LocalSourceFile(str(script)),
        None,
        "",
        str(tmp_path),
        *job_arguments(tmp_path),
        None,  # conda_env
        None,  # container_img
        None,  # singularity_args
        None,  # env_modules
        None,  # bench_record
        1,  # jobid
        0,  # bench_iteration
        True,  # cleanup_scripts
        None,  # shadow_dir
        True,  # is_local
        preamble_addendum="",
    )
    proc = subprocess.run([sys.executable, "-c", preamble + BODY], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_stage_py_gets_snakemakes_items_from_ethosweeps_preamble_without_importing_snakemake(tmp_path):
    ours = run_script(tmp_path, REPO / "workflow" / "scripts" / "stage.py")
    theirs = run_script(tmp_path, tmp_path / "another_script.py")  # any other script: Snakemake's own
    assert ours.pop("snakemake imported") is False and theirs.pop("snakemake imported") is True
    assert ours == theirs
    assert ours["items"]["input"]["records"] == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert ours["items"]["params"]["vela"] == {"optimise": "Size"} and ours["mem_mb"] == 1500
