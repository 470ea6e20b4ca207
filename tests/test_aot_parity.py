"""ethosweep compiles a cell exactly as ExecuTorch's own aot_arm_compiler does."""

import csv
import os
import sys
from pathlib import Path

import preloaded
from conftest import REPO, U55_CELL
from ethosweep.runtime.io import read_json

sys.path.insert(0, str(REPO / "perf"))
from peer import AOT_MODULE, program_without_debug_path  # noqa: E402 - the benchmarks' own comparison with the seeds' way

SEED_CELL_FLAGS = ["--target=ethos-u55-128", "--system_config=Ethos_U55_High_End_Embedded", "--memory_mode=Shared_Sram"]


def run_aot(tmp_path: Path, intermediates: Path | None) -> Path:
    """aot_arm_compiler on the seed MNIST cell; with `intermediates`, it also keeps Vela's reports
    there. Forked from the session's server that imported it (tests/preloaded.py), as the
    benchmarks' seeds' way is: its import is most of a run's CPU."""
    pte = tmp_path / ("aot_intermediates.pte" if intermediates else "aot.pte")
    args = [
        f"--model_name={REPO / 'models' / 'mnist.py'}",
        "--delegate",
        "--quantize",
        *SEED_CELL_FLAGS,
        f"--output={pte}",
        *([f"--intermediates={intermediates}"] if intermediates else []),
    ]
    log = tmp_path / "aot.log"
    status = preloaded.run_module(AOT_MODULE, args, cwd=str(tmp_path), env=dict(os.environ), stdout=log, stderr=log)
    assert status == 0, log.read_text()[-3000:]
    return pte


def test_seed_mnist_pte_is_byte_identical_to_aot_arm_compilers(tiny_sweep, tmp_path):
    # Without --intermediates aot_arm_compiler records no debug path in the compile specs, so the
    # two files can be compared as they are: every byte, Vela command stream and weights included.
    aot_pte = run_aot(tmp_path, intermediates=None)
    our_pte = tiny_sweep / "results" / "vela" / U55_CELL / "model.pte"
    assert our_pte.read_bytes() == aot_pte.read_bytes()


def test_seed_mnist_vela_cycles_match_aot_arm_compilers(tiny_sweep, tmp_path):
    intermediates = tmp_path / "aot_intermediates"
    aot_pte = run_aot(tmp_path, intermediates)
    (aot_summary,) = intermediates.glob("output/out_summary_*.csv")
    with open(aot_summary, newline="") as f:
        aot = next(csv.DictReader(f))
    ours = read_json(tiny_sweep / "results" / "vela" / U55_CELL / "summary.json")["cell"]
    assert int(aot["cycles_total"]) == ours["cycles_total"] == 138824
    assert int(aot["cycles_npu"]) == ours["cycles_npu"] == 52036
    assert int(aot["nn_macs"]) == ours["nn_macs"] == 1135872
    # With --intermediates the peer's .pte also records that folder in its compile specs; apart
    # from that one entry the programs are equal.
    our_pte = tiny_sweep / "results" / "vela" / U55_CELL / "model.pte"
    assert aot_pte.read_bytes() != our_pte.read_bytes()
    assert program_without_debug_path(aot_pte) == program_without_debug_path(our_pte)
