"""ethosweep compiles a cell exactly as ExecuTorch's own aot_arm_compiler does."""

import csv
import subprocess
import sys
from pathlib import Path

from conftest import REPO, U55_CELL
from ethosweep.io import read_json


def run_aot(tmp_path: Path) -> tuple[Path, Path]:
    pte, intermediates = tmp_path / "aot.pte", tmp_path / "aot_intermediates"
    subprocess.run(
        [sys.executable, "-m", "executorch.backends.arm.scripts.aot_arm_compiler",
         f"--model_name={REPO / 'models' / 'mnist.py'}", "--delegate", "--quantize",
         "--target=ethos-u55-128", "--system_config=Ethos_U55_High_End_Embedded", "--memory_mode=Shared_Sram",
         f"--output={pte}", f"--intermediates={intermediates}"],
        check=True, capture_output=True, cwd=tmp_path,
    )
    return pte, intermediates


def program_without_debug_path(pte: Path):
    """The deserialised program, minus the intermediates path that -i records in the compile specs."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte.read_bytes()).program
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            delegate.compile_specs = [s for s in delegate.compile_specs if s.key != "debug_artifact_path"]
    return program


def test_seed_mnist_on_u55_128_matches_aot_arm_compiler(tiny_sweep, tmp_path):
    aot_pte, intermediates = run_aot(tmp_path)
    (aot_summary,) = intermediates.glob("output/out_summary_*.csv")
    with open(aot_summary, newline="") as f:
        aot = next(csv.DictReader(f))

    ours = read_json(tiny_sweep / "results" / "vela" / U55_CELL / "summary.json")["cell"]
    assert int(aot["cycles_total"]) == ours["cycles_total"] == 138824
    assert int(aot["cycles_npu"]) == ours["cycles_npu"] == 52036
    assert int(aot["nn_macs"]) == ours["nn_macs"] == 1135872

    # Beyond the cycles: the same program, Vela command stream and weights included.
    our_pte = tiny_sweep / "results" / "lower" / U55_CELL / "model.pte"
    assert program_without_debug_path(our_pte) == program_without_debug_path(aot_pte)
