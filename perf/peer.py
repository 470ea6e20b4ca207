"""The seeds' way, for the benchmarks that compare against it: `aot_arm_compiler --delegate
--quantize` once per cell, on a model file that builds each model as ethosweep's export stage
does, calibrated on the samples ethosweep's quantize stage calibrates on; and the checks that
both sides compiled the same programs (the speed must not come from doing less)."""

from __future__ import annotations

import concurrent.futures
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from workdirs import SHARED_WORKERS, preloaded

REPO = Path(__file__).resolve().parents[1]

PEER_MODEL_FILE = '''\
"""aot_arm_compiler model file for {name}: built exactly as ethosweep's export stage builds it (seeded)."""
import sys
sys.path.insert(0, {src!r})
from ethosweep.zoo.models import initialise, load_model
from ethosweep.matrix.models import model_spec_from_params

spec = model_spec_from_params({params!r})
ModelUnderTest, ModelInputs = load_model(spec, seed={seed}, base_dir={base!r})
initialise(ModelUnderTest, spec.init, ModelInputs, {seed})
'''


def peer_cells(sweep) -> tuple[list, list[str]]:
    """The cells the seeds' way can compile, and why each other one is left out: aot_arm_compiler
    quantizes Ethos-U targets as int8 only (a16w8 is for its TOSA int16 targets) and calibrates on
    files, not on a dataset ethosweep loads (or a model it trains)."""
    cells, left_out = [], []
    for cell in sweep.cells:
        dataset = sweep.models[cell.model].dataset
        if cell.quant != "int8":
            left_out.append(f"{cell.id}: aot_arm_compiler quantizes Ethos-U targets as int8 only")
        elif dataset not in (None, "random"):
            left_out.append(f"{cell.id}: calibrated on a dataset ethosweep loads ({dataset})")
        else:
            cells.append(cell)
    return cells, left_out


def write_peer_models(peer_dir: Path, sweep, cells) -> None:
    """A model file per model, and the calibration samples of a model calibrated on random inputs
    (`dataset: random`) as the .pt files aot_arm_compiler's --calibration_data reads, in order."""
    (peer_dir / "models").mkdir(parents=True, exist_ok=True)
    for name in sorted({c.model for c in cells}):
        spec = sweep.models[name]
        text = PEER_MODEL_FILE.format(
            name=name, src=str(REPO / "src"), params=spec.as_params(), seed=sweep.seed, base=str(REPO)
        )
        (peer_dir / "models" / f"{name}.py").write_text(text)
        if spec.dataset == "random":
            _write_calibration(peer_dir / "calibration" / name, spec, sweep)


def _write_calibration(folder: Path, spec, sweep) -> None:
    import torch

    from ethosweep.compile.artifacts import calibration_set
    from ethosweep.zoo.models import load_model

    _, example_inputs = load_model(spec, sweep.seed, REPO)
    samples, _ = calibration_set(example_inputs, "random", calibration_samples(sweep), sweep.seed)
    folder.mkdir(parents=True, exist_ok=True)
    for index, sample in enumerate(samples):
        torch.save(tuple(sample), folder / f"{index:05d}.pt")


def calibration_samples(sweep) -> int:
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    default = schema["properties"]["numerics"]["properties"]["calibration_samples"]["default"]
    return int(sweep.numerics.get("calibration_samples", default))


def peer_command(peer_dir: Path, out: Path, cell) -> list[str]:
    """aot_arm_compiler for one cell. `--non_strict_export`: ethosweep exports as torch.export does by
    default (non-strict); aot_arm_compiler's default, strict (Dynamo), names tensors otherwise, so the
    TOSA would differ in its names (and strict is slower: the seeds' way timed here is, if anything,
    faster than as it comes)."""
    calibration = peer_dir.parent / "calibration" / cell.model
    return [
        sys.executable,
        "-m",
        "executorch.backends.arm.scripts.aot_arm_compiler",
        f"--model_name={peer_dir.parent / 'models' / cell.model}.py",
        "--delegate",
        "--quantize",
        "--non_strict_export",
        *([f"--calibration_data={calibration}"] if calibration.is_dir() else []),
        f"--target={cell.target}",
        f"--system_config={cell.system_config}",
        f"--memory_mode={cell.memory_mode}",
        f"--output={out / 'model.pte'}",
        f"--intermediates={out / 'intermediates'}",
    ]


# One thread a process, as each of ethosweep's jobs has (Snakemake's `threads: 1`): BatchNorm and
# quantization calibration sum in float, and another thread count rounds some sums otherwise, which
# moves a few quantized weights by a step (MobileNetV2: 34,896 bytes of its TOSA with torch's default).
PEER_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run_peer(peer_dir: Path, cells, workers: int) -> dict[str, str]:
    """Every cell the seeds' way, `workers` at a time; cell id -> '' or why it failed (its log's
    last line: a cell the seeds' way cannot compile fails there, and is not compared)."""
    shutil.rmtree(peer_dir, ignore_errors=True)
    run = _forked_from_one_import() if os.environ.get(SHARED_WORKERS) == "shared" else _process

    def one(cell) -> tuple[str, str]:
        out = peer_dir / cell.id
        out.mkdir(parents=True)
        code = run(peer_command(peer_dir, out, cell), out)
        if code == 0:
            return cell.id, ""
        lines = [line for line in (out / "log.txt").read_text(errors="replace").splitlines() if line.strip()]
        return cell.id, f"exit {code}: {lines[-1][:200] if lines else 'no output'}"

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(one, cells))


def _process(command: list[str], out: Path) -> int:
    """The command in a process of its own, as the seeds' way runs it; its exit status."""
    with open(out / "log.txt", "w") as log:
        return subprocess.run(command, stdout=log, stderr=log, cwd=out, env=PEER_ENV).returncode


# The tests' small modes (SHARED_WORKERS, as their cold runs use the machine's warm worker): each
# command forked from a process that imported aot_arm_compiler once for the test session
# (tests/preloaded.py), instead of a process that imports torch and ExecuTorch again (~9 CPU-seconds).
# Its time is not the seeds' way's.
AOT_MODULE = "executorch.backends.arm.scripts.aot_arm_compiler"


def _forked_from_one_import():
    servers = preloaded()
    print(f"  (the seeds' way runs forked from one process that imported it: {SHARED_WORKERS}=shared; not its times)")

    def run(command: list[str], out: Path) -> int:
        args = command[command.index(AOT_MODULE) + 1 :]
        log = out / "log.txt"
        return servers.run_module(AOT_MODULE, args, cwd=str(out), env=PEER_ENV, stdout=log, stderr=log)

    return run


# ---- the same work ---------------------------------------------------------------------


def vela_blobs(pte: Path) -> list[bytes]:
    """The Vela command stream + weights of every delegate in a .pte, in order."""
    data, blobs, start = pte.read_bytes(), [], 0
    while (begin := data.find(b"vela_bin_stream", start)) != -1:
        end = data.find(b"vela_end_stream", begin)
        blobs.append(data[begin:end])
        start = end + 1
    return blobs


def program_without_debug_path(pte: Path):
    """The deserialised program without the `debug_artifact_path` compile spec that -i adds."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte.read_bytes()).program
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            delegate.compile_specs = [s for s in delegate.compile_specs if s.key != "debug_artifact_path"]
    return program


def compare_work(work: Path, peer_dir: Path, cells, failed: dict[str, str] | None = None) -> list[str]:
    """Cells where ethosweep and the peer compiled something different (none expected), per cell:
    the programs equal apart from the intermediates path aot_arm_compiler records; every delegate's
    Vela command stream and weights byte-identical (a .pte without any Vela payload fails: there
    would be nothing to compare); Vela's cycles equal for the last partition, the only one whose
    report aot_arm_compiler keeps (its intermediates folder has fixed file names). `failed`: run_peer's
    record; a cell the seeds' way failed is a mismatch of its own, nothing to compare."""
    failed = {cell: why for cell, why in (failed or {}).items() if why}
    mismatches = [f"{cell}: the seeds' way failed ({why})" for cell, why in failed.items()]
    for cell in cells:
        if cell.id in failed:
            continue
        ours = json.loads((work / "results" / "vela" / cell.id / "summary.json").read_text())
        our_pte, peer_pte = work / "results" / "vela" / cell.id / "model.pte", peer_dir / cell.id / "model.pte"
        problems = []
        our_blobs, peer_blobs = vela_blobs(our_pte), vela_blobs(peer_pte)
        if not our_blobs or not peer_blobs:
            problems.append(f"no Vela payload (ours {len(our_blobs)}, peer {len(peer_blobs)} delegates)")
        elif our_blobs != peer_blobs:
            problems.append(f"Vela command streams or weights differ ({len(our_blobs)} vs {len(peer_blobs)} delegates)")
        if program_without_debug_path(our_pte) != program_without_debug_path(peer_pte):
            problems.append("the programs differ beyond the intermediates path")
        peer_csv = next((peer_dir / cell.id / "intermediates" / "output").glob("out_summary_*.csv"))
        with open(peer_csv, newline="") as f:
            peer_cycles = int(next(csv.DictReader(f))["cycles_total"])
        our_last = ours["partitions"][-1]["cycles_total"]
        if peer_cycles != our_last:
            problems.append(f"last partition: peer {peer_cycles} Vela cycles, ours {our_last}")
        if problems:
            mismatches.append(f"{cell.id}: " + "; ".join(problems))
    return mismatches


def undelegated_by_peer(work: Path, peer_dir: Path, cells) -> dict[str, str]:
    """Cells the seeds' way compiled without any NPU delegate where ethosweep delegates: cell id ->
    the operators it left on the CPU (its log's delegation summary, the quantize ops left out).
    Exported strict (aot_arm_compiler's default without --non_strict_export), nn.TransformerEncoderLayer
    becomes PyTorch's fused fast-path operator, which the partitioner does not take."""
    undelegated = {}
    for cell in cells:
        if vela_blobs(peer_dir / cell.id / "model.pte") or not vela_blobs(
            work / "results/vela" / cell.id / "model.pte"
        ):
            continue
        log = (peer_dir / cell.id / "log.txt").read_text(errors="replace").split("Non-delegated operators:")[-1]
        operators = [
            line.strip()[2:]
            for line in log.split("\n\n")[0].splitlines()
            if line.strip().startswith("- ") and "quantize_per_tensor" not in line
        ]
        undelegated[cell.id] = ", ".join(operators) or "nothing delegated"
    return undelegated


def same_work_line(cells) -> str:
    return (
        f"same work: all {len(cells)} cells have equal programs (apart from the peer's intermediates path) "
        "with byte-identical Vela command streams and weights in every delegate, and equal Vela cycles for "
        "each cell's last partition (the only one whose report aot_arm_compiler keeps)"
    )


def stage_seconds(work: Path) -> dict[str, float]:
    """ethosweep's job-seconds per rule, from each job's Snakemake benchmark file."""
    seconds: dict[str, float] = {}
    for tsv in (work / "benchmarks").rglob("*.tsv"):
        rule = Path(tsv.relative_to(work / "benchmarks").parts[0]).stem  # a folder, or one job's file
        with open(tsv, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if rows:
            seconds[rule] = seconds.get(rule, 0.0) + float(rows[-1]["s"])
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))
