"""CPU-only cells run in QEMU: the runner ELF on `qemu-system-arm -M mps3-an547`, its outputs checked.

QEMU is not cycle-accurate: a run here is a functional check of the firmware (it loads, runs,
gives the right numbers), never a timing. The runner (ethosweep.firmware.own_runner builds it) prints
`ethosweep-runner: ...` lines and writes its outputs over semihosting; this module runs it, reads
both and compares the outputs with the PyTorch reference.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from ethosweep.matrix.targets import CPU_BOARD
from ethosweep.runtime.errors import Fault, StageError, fault_of_process
from ethosweep.runtime.io import atomic_write_bytes, write_json

QEMU = "qemu-system-arm"
# ExecuTorch's ScalarType codes the runner prints, as numpy dtypes.
SCALAR_TYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 6: np.float32, 11: np.bool_}


def qemu_command(elf, pte: str, inputs: str, outputs: str, qemu: str = QEMU) -> list[str]:
    """QEMU's mps3-an547 with semihosting (the runner's files and stdout); no UART, no monitor.
    The semihosting argv is space-separated, so the files are named relative to the run folder."""
    args = ",".join(f"arg={a}" for a in ("ethosweep_runner", pte, inputs, outputs))
    return [
        qemu,
        "-M",
        CPU_BOARD,
        "-nographic",
        "-monitor",
        "none",
        "-serial",
        "null",
        "-semihosting-config",
        f"enable=on,target=native,{args}",
        "-kernel",
        str(elf),
    ]


RUNNER_LINE = re.compile(r"^ethosweep-runner: (.*)$")


def parse_runner_output(text: str) -> dict:
    """The runner's `ethosweep-runner:` lines as JSON (tests/data/runner_logs has a recorded run)."""
    result: dict = {"inputs": [], "outputs": [], "errors": [], "done": False, "log": []}
    for line in text.splitlines():
        match = RUNNER_LINE.match(line.strip())
        if not match:
            if line.strip():
                result["log"].append(line.strip())
            continue
        fact = match.group(1)
        if fact == "done":
            result["done"] = True
        elif fact.startswith("error: "):
            result["errors"].append(fact[len("error: ") :])
        elif fact.startswith(("input ", "output ")):
            kind, index, *fields = fact.split()
            values = dict(f.split("=", 1) for f in fields)
            result[f"{kind}s"].append(
                {
                    "index": int(index),
                    "dtype": int(values["dtype"]),
                    "shape": [int(d) for d in values["shape"].strip("[]").split(",") if d],
                    "bytes": int(values["bytes"]),
                }
            )
        else:
            _parse_fact(fact, result)
    return result


def _parse_fact(fact: str, result: dict) -> None:
    if fact.startswith("program "):
        values = dict(f.split("=", 1) for f in fact.split()[1:])
        result["program_bytes"], result["method"] = int(values["bytes"]), values["method"]
    elif fact.startswith("planned "):
        values = dict(f.split("=", 1) for f in fact.split()[1:])
        result["planned_bytes"] = int(values["bytes"])
    elif m := re.match(r"(method|temp) allocator used=(\d+) of (\d+)", fact):
        result[f"{m.group(1)}_allocator"] = {"used": int(m.group(2)), "size": int(m.group(3))}
    elif m := re.match(r"(load_method|execute) error=(0x[0-9a-f]+)", fact):
        result["et_error"] = {"stage": m.group(1), "code": m.group(2)}


def split_outputs(raw: bytes, outputs: list[dict]) -> list[np.ndarray]:
    """The runner's output file, cut into the tensors its log describes."""
    arrays, offset = [], 0
    for out in outputs:
        dtype = SCALAR_TYPES.get(out["dtype"])
        if dtype is None:
            raise StageError(
                f"output {out['index']} has ExecuTorch scalar type {out['dtype']}, which ethosweep cannot read"
            )
        chunk = raw[offset : offset + out["bytes"]]
        arrays.append(np.frombuffer(chunk, dtype=dtype).reshape(out["shape"]))
        offset += out["bytes"]
    if offset != len(raw):
        raise StageError(f"the output file has {len(raw)} bytes, the log describes {offset}")
    return arrays


def compare_outputs(got: list[np.ndarray], expected: list, float_outputs: list, label, scales=()) -> dict:
    """The firmware's outputs against the lowered graph run in PyTorch (the same int8 program: they
    should agree to rounding) and against the float model (what quantization costs)."""
    per_output = []
    for index, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e.detach().numpy() if hasattr(e, "detach") else e).reshape(g.shape)
        f = float_outputs[index].detach().numpy().reshape(g.shape) if index < len(float_outputs) else None
        diff = float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64)))) if g.size else 0.0
        step = scales[index] if index < len(scales) else None
        entry = {
            "index": index,
            "shape": list(g.shape),
            "max_abs_diff": diff,
            "max_diff_steps": round(diff / step, 2) if step else None,
            "argmax_firmware": int(np.argmax(g)),
            "argmax_reference": int(np.argmax(e)),
        }
        if f is not None and f.size:
            entry["max_abs_diff_float"] = float(np.max(np.abs(g.astype(np.float64) - f.astype(np.float64))))
            entry["argmax_float"] = int(np.argmax(f))
        per_output.append(entry)
    if len(got) != len(expected):
        return {
            "match": False,
            "outputs": per_output,
            "line": f"differs: the firmware gave {len(got)} outputs, the reference has {len(expected)}",
        }
    # in output steps where the output's scale is known, else in absolute value
    worst = max(
        (o["max_diff_steps"] if o["max_diff_steps"] is not None else o["max_abs_diff"] for o in per_output), default=0.0
    )
    match = worst <= 1.0
    same_top1 = all(o["argmax_firmware"] == o["argmax_reference"] for o in per_output)
    line = (
        f"{'matches' if match else 'differs from'} the PyTorch reference of the lowered program "
        f"(max {worst:g} output steps" + (", same top-1" if same_top1 else ", top-1 differs") + ")"
    )
    if label is not None:
        line += f"; label {label}, firmware top-1 {per_output[0]['argmax_firmware']}"
    return {
        "match": match,
        "same_top1": same_top1,
        "max_diff_steps": worst,
        "outputs": per_output,
        "label": label,
        "line": line,
    }


def run_in_qemu(elf, pte, run_inputs, timeout: int, qemu: str = QEMU) -> tuple[dict, bytes, str]:
    """Run the runner on one .pte and input; (parsed log, output bytes, full log)."""
    with tempfile.TemporaryDirectory(prefix="ethosweep-qemu-") as folder:
        work = Path(folder)
        shutil.copyfile(pte, work / "model.pte")
        shutil.copyfile(run_inputs, work / "inputs.bin")
        command = qemu_command(Path(elf).resolve(), "model.pte", "inputs.bin", "outputs.bin", qemu)
        started = time.monotonic()
        try:
            result = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            # a time limit is the machine's (a loaded machine runs QEMU slower): retried, not kept
            raise StageError(f"QEMU did not finish within {timeout} s (sdk.qemu_timelimit)", Fault.TIME) from error
        text = result.stdout + result.stderr
        parsed = parse_runner_output(text)
        parsed.update(
            {
                "exit_code": result.returncode,
                "wall_seconds": round(time.monotonic() - started, 2),
                "command": " ".join(command),
            }
        )
        raw = (work / "outputs.bin").read_bytes() if (work / "outputs.bin").is_file() else b""
    return parsed, raw, text


def qemu_cell(elf, pte, run_inputs, reference, run, console, timelimit: int = 300, qemu: str = QEMU) -> dict:
    """Run one CPU-only cell in QEMU and check its outputs against the reference."""
    run_json, log_out, timeout = run, console, timelimit  # the workflow's names (runtime.binding)
    import torch

    parsed, raw, text = run_in_qemu(elf, pte, run_inputs, timeout, qemu)
    atomic_write_bytes(log_out, text.encode())
    if parsed["exit_code"] != 0 or not parsed["done"]:
        reason = "; ".join(parsed["errors"]) or f"exit code {parsed['exit_code']}"
        cause = fault_of_process(parsed["exit_code"], text)  # QEMU itself crashing is not the cell's, once
        raise StageError(f"the runner failed in QEMU: {reason} (log: {log_out})", cause)
    ref = torch.load(reference, weights_only=True)
    comparison = compare_outputs(
        split_outputs(raw, parsed["outputs"]), ref["expected"], ref["float"], ref["label"], ref.get("scales", ())
    )
    record = {
        **{k: v for k, v in parsed.items() if k != "log"},
        "comparison": comparison,
        "timing": "functional only: QEMU is not cycle-accurate, its time means nothing for the target",
    }
    write_json(run_json, record)
    return record
