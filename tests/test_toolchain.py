"""Results know the toolchain that made them: a real Vela upgrade reruns exactly the Vela jobs and
what reads them, declared model files rerun their model, and other Vela versions are an axis of
the matrix, compiled side by side from the same TOSA."""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from conftest import (
    END_OF_RUN,
    REPO,
    U55_CELL,
    append,
    job_stats,
    make_workdir,
    model_chain,
    planned_jobs,
    snakemake,
    typed,
)
from ethosweep.compile.compile_spec import vela_flags
from ethosweep.matrix.cell import Cell
from ethosweep.runtime.io import read_json
from ethosweep.vela.partitions import compile_partition, vela_error_message

INSTALLED = importlib.metadata.version("ethos-u-vela")
OTHER = "5.2.0"  # on the registry; reads the TOSA ExecuTorch 1.5.1 writes (docs/vela-versions.md)
OLD = "4.1.0"  # on the registry; reads TOSA 0.80 only
DATA = Path(__file__).parent / "data" / "vela"

needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv on PATH (pip install uv)")


def summary_rows(workdir: Path) -> list[dict]:
    with open(workdir / "results" / "summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def row(workdir: Path, cell: str, board: str = "alif-e8") -> dict:
    (found,) = [r for r in summary_rows(workdir) if r["cell"] == cell and r["board"] in ("", board)]
    return found


def set_vela_versions(workdir: Path, versions: list[str]) -> None:
    path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["vela"] = {"versions": versions}
    path.write_text(yaml.safe_dump(config, sort_keys=False))


# What a Vela change reruns in the tiny sweep: each cell's Vela job (its .pte and C header) and
# what reads them, and no export, quantization, lowering or verification.
VELA_AND_WHAT_READS_IT = {
    "compile_with_vela": 6,
    "bundle_program": 6,
    "verify_fallbacks": 6,  # each profile's fallback check reads its cells' compile records
    "plan_firmware": 2,
    "bundle_deployment": 8,  # 4 U55 cells on 2 boards
    **END_OF_RUN,
}


@needs_uv
def test_a_vela_upgrade_reruns_the_vela_jobs_and_what_reads_them_only(sweep_copy):
    # A real version change: the project's environment with ethos-u-vela 5.2.0 layered over it.
    upgraded = f"uv run --with ethos-u-vela=={OTHER} snakemake --cores 2"
    proc = typed(f"uv run --with ethos-u-vela=={OTHER} snakemake -n", sweep_copy)  # as docs/how-it-works.md writes it
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_stats(proc.stdout + proc.stderr) == VELA_AND_WHAT_READS_IT
    lowered = sweep_copy / "results/lower/mnist/int8/u55/template.pte"
    lowered_before = lowered.stat().st_mtime_ns
    proc = typed(upgraded, sweep_copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # every row now says which Vela made it, and its figures are that Vela's
    mnist = row(sweep_copy, U55_CELL)
    assert (mnist["vela_version"], mnist["executorch_version"]) == (OTHER, "1.5.1")
    assert mnist["vela_cycles_total"] == "133199"  # Vela 5.1.0: 138,824
    assert lowered.stat().st_mtime_ns == lowered_before
    # back on the locked environment, the same Vela jobs are stale again, and nothing else
    assert planned_jobs(sweep_copy) == VELA_AND_WHAT_READS_IT


def test_with_the_environment_unchanged_nothing_reruns(tiny_sweep):
    assert planned_jobs(tiny_sweep) == {}


def test_a_declared_model_file_reruns_that_models_chain_only(sweep_copy):
    # mnist declares data/mnist_reads.txt (`reads:`); mnist_digits shares its model file but not this
    append(sweep_copy / "data" / "mnist_reads.txt", "edited\n")
    assert planned_jobs(sweep_copy) == {
        **model_chain(exports=1, profiles=2, cells=2),
        "bundle_program": 2,
        "bundle_deployment": 2,
        "plan_firmware": 2,
        "lower_cpu": 1,
        "summarize_cpu": 1,
        **END_OF_RUN,
    }


BLOCK = """import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))
"""


def test_a_module_beside_a_model_file_is_its_code(tmp_path):
    """A model file's own modules import as they would for `python <file>`, and editing one
    reruns that model's chain (they are inputs of its jobs)."""
    work = make_workdir(
        tmp_path,
        {
            "models": [{"name": "helped", "file": "mine/net.py"}],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
        },
    )
    (work / "mine").mkdir()
    (work / "mine" / "blocks.py").write_text(BLOCK)
    (work / "mine" / "net.py").write_text(
        "import torch\nfrom blocks import Block\n\nModelUnderTest = Block()\nModelInputs = (torch.randn(1, 8),)\n"
    )
    snakemake(work)
    assert planned_jobs(work) == {}
    (work / "mine" / "blocks.py").write_text(BLOCK.replace("Linear(8, 4)", "Linear(8, 6)"))
    jobs = planned_jobs(work)
    assert (jobs["export_model"], jobs["lower_to_tosa"], jobs["compile_with_vela"]) == (1, 1, 1)
    snakemake(work)
    (summary,) = summary_rows(work)
    assert summary["status"] == "ok" and summary["npu_ops"] != ""


def test_another_vela_version_packs_its_output_exactly_as_executorch_does(tiny_sweep, tmp_path):
    # The installed Vela's own command, run as another version's would be (a separate process
    # inside vela_compile), gives the payload ExecuTorch's in-process call gives, byte for byte.
    tosa = (tiny_sweep / "results/lower/mnist/int8/u55/tosa/partition_0.tosa").read_bytes()
    flags = vela_flags(Cell("mnist", "int8", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"))
    in_process = compile_partition(tosa, flags, tmp_path / "a", what="Vela")
    vela = str(Path(sys.executable).parent / "vela")
    command = compile_partition(tosa, flags, tmp_path / "b", what="Vela", vela_command=vela)
    assert command[0] == in_process[0] and len(command[0]) > 50_000
    assert command[1] == in_process[1] and command[1]["cycles_total"] == 138824


def test_vela_failures_are_told_in_velas_own_words():
    # recorded: Vela 4.0.0 on ExecuTorch 1.5.1's TOSA, and Vela 3.12.0 given a flag it predates
    assert vela_error_message((DATA / "vela_4.0.0_tosa_1.0.log").read_text()) == (
        "Unsupported TOSA version: 1.0.0 (AssertionError)"
    )
    assert vela_error_message((DATA / "vela_3.12.0_unknown_flag.log").read_text()) == (
        "vela: error: unrecognized arguments: --output-format=raw"
    )


@pytest.mark.slow
@needs_uv
def test_other_vela_versions_are_compiled_side_by_side(sweep_copy):
    before = {p: p.read_bytes() for p in (sweep_copy / "results/vela").rglob("model.pte")}
    set_vela_versions(sweep_copy, [INSTALLED, OTHER])
    # one more Vela job per cell (and what reads it) plus the version's environment, made once;
    # the installed version's cells keep their paths and are not redone
    assert planned_jobs(sweep_copy) == {"install_vela": 1, **VELA_AND_WHAT_READS_IT}
    snakemake(sweep_copy)
    assert {p: p.read_bytes() for p in before} == before  # byte-identical, untouched
    env = read_json(sweep_copy / f"results/tools/vela/{OTHER}/env.json")
    assert env["version"] == OTHER and env["packages"]["ethos-u-vela"] == OTHER and len(env["lock_sha256"]) == 64
    other = row(sweep_copy, f"{U55_CELL}@vela-{OTHER}")
    assert (other["status"], other["vela_version"], other["vela_cycles_total"]) == ("ok", OTHER, "133199")
    assert row(sweep_copy, U55_CELL)["vela_cycles_total"] == "138824"
    compiled = read_json(sweep_copy / "results/vela" / f"{U55_CELL}@vela-{OTHER}" / "compile.json")
    assert compiled["versions"]["vela"] == OTHER
    assert (
        compiled["pte_sha256"]
        == hashlib.sha256(
            (sweep_copy / "results/vela" / f"{U55_CELL}@vela-{OTHER}" / "model.pte").read_bytes()
        ).hexdigest()
    )
    # side by side, in the report and in `ethosweep compare`
    report = (sweep_copy / "results/report/index.html").read_text()
    assert f"Vela {OTHER} vs {INSTALLED}: mnist [int8] on ethos-u55-128 −4.1 % cycles" in report
    proc = typed("uv run ethosweep compare results/summary.csv", sweep_copy)
    assert f"Vela {OTHER} vs {INSTALLED}: mnist [int8] on ethos-u55-128 −4.1 % cycles" in proc.stdout
    assert "layer tosa_rescale_default (DepthwiseConv2D, partition 0): 14,956 → 11,316 cycles" in proc.stdout
    assert planned_jobs(sweep_copy) == {}

    # A version that cannot compile ExecuTorch's TOSA fails only its own cells, in its own words.
    # 4.1.0: the oldest with a wheel for this Python; 4.0.0 builds its C++ compiler from source
    # (7 minutes here, again in each run: uv re-fetches that sdist and drops the build).
    set_vela_versions(sweep_copy, [INSTALLED, OTHER, OLD])
    snakemake(sweep_copy, check=False)
    failed = row(sweep_copy, f"{U55_CELL}@vela-{OLD}")
    assert failed["status"] == "failed"
    assert f"Vela {OLD} failed on partition 0: Unsupported TOSA version: 1.0.0 (AssertionError)" in failed["reason"]
    assert {r["status"] for r in summary_rows(sweep_copy) if r["vela_version"] != OLD} == {"ok"}
    repro = (sweep_copy / "results/vela" / f"{U55_CELL}@vela-{OLD}" / "repro" / "command.sh").read_text()
    assert f"uvx --from ethos-u-vela=={OLD} vela partition_0.tosa" in repro


def test_the_toolchain_versions_reach_every_rule_that_runs_code():
    # each rule's `tools` param names the same stage modules as its `code` param (tests/test_layout.py
    # checks the code params), so the two can never drift apart
    import re

    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", path.read_text(), re.S | re.M):
            body = match.group(2)
            code = re.search(r"code=code_version\(([^)]*)\)", body)
            if code is None:
                continue
            tools = re.search(r"tools=(?:stage_versions|model_tools|vela_tools)\(([^)]*)\)", body)
            assert tools is not None, f"rule {match.group(1)} has no tools param"
            assert tools.group(1) == code.group(1), f"rule {match.group(1)}: tools and code name other modules"
