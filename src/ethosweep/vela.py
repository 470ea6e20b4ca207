"""Stage 4, vela: standalone Vela on each partition's TOSA, with per-layer detail.

Needs no torch: a Vela run on a TOSA flatbuffer takes well under a second.
All numbers here are Vela's *compiler estimates* (its performance model), not
measurements; the summary labels them so.

Cell figures from several partitions: the partitions run one after another,
so cycles, MACs, inference time and off-chip/flash traffic add up, while the
SRAM arena is reused by each in turn, so the cell's SRAM need is the largest
partition's. Weights and command streams are stored side by side, so flash
and DRAM use add up.
"""

from __future__ import annotations

import csv
import io
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from ethosweep.compile_spec import standalone_vela_args
from ethosweep.integrity import verify
from ethosweep.io import atomic_write_text, read_json, write_json
from ethosweep.errors import StageError
from ethosweep.provenance import tool_versions

log = logging.getLogger(__name__)

# Summary fields that add up over partitions, and those where the cell needs the largest.
SUMMED = (
    "cycles_total", "cycles_npu", "cycles_sram_access", "cycles_dram_access",
    "cycles_on_chip_flash_access", "cycles_off_chip_flash_access", "nn_macs",
    "inference_time", "dram_memory_used", "on_chip_flash_memory_used",
    "off_chip_flash_memory_used", "total_original_weights", "total_npu_encoded_weights",
    "sram_total_bytes", "dram_total_bytes", "on_chip_flash_total_bytes", "off_chip_flash_total_bytes",
)
PEAK = ("sram_memory_used",)
SHARED = ("accelerator_configuration", "system_config", "memory_mode", "core_clock", "arena_cache_size",
          "weights_storage_area", "feature_map_storage_area")


class VelaStageError(StageError):
    pass


def run_vela(tosa: Path, args: list[str], output_dir: Path) -> tuple[dict, list[dict]]:
    """Run `vela` on one TOSA file; return (summary row, per-layer rows)."""
    command = [sys.executable, "-m", "ethosu.vela", str(tosa), *args,
               f"--output-dir={output_dir}", "--output-format=raw", "--verbose-performance"]
    log.info("running: %s", " ".join(command[1:]))
    proc = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stdout.flush()
    if proc.returncode != 0:
        raise VelaStageError(f"Vela failed on {tosa.name}: {_last_error_line(proc.stderr or proc.stdout)}")
    stem = tosa.stem
    summary_files = sorted(output_dir.glob(f"{stem}_summary_*.csv"))
    per_layer_file = output_dir / f"{stem}_per-layer.csv"
    if not summary_files or not per_layer_file.exists():
        raise VelaStageError(f"Vela wrote no performance report for {tosa.name} (looked in {output_dir})")
    return read_summary(summary_files[0]), read_per_layer(per_layer_file)


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[-1]


def read_summary(path: Path) -> dict:
    with open(path, newline="") as f:
        row = next(csv.DictReader(f))
    return {key: _parse(value) for key, value in row.items()}


def read_per_layer(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{key.strip(): _parse(value) for key, value in row.items()} for row in csv.DictReader(f)]


def _parse(text):
    try:
        number = float(text)
    except (TypeError, ValueError):
        return text
    return int(number) if number.is_integer() and "." not in str(text) else number


def aggregate(partitions: list[dict]) -> dict:
    """One cell's figures from its partitions' summaries (see the module docstring)."""
    if not partitions:
        return {}
    cell = {key: partitions[0].get(key) for key in SHARED}
    for key in SUMMED:
        cell[key] = sum(p.get(key) or 0 for p in partitions)
    for key in PEAK:
        cell[key] = max(p.get(key) or 0 for p in partitions)
    cell["partitions"] = len(partitions)
    cell["inference_time_ms"] = cell["inference_time"] * 1e3
    cell["inferences_per_second"] = 1.0 / cell["inference_time"] if cell["inference_time"] else None
    cell["mac_utilisation"] = mac_utilisation(cell["nn_macs"], cell["cycles_total"], partitions[0].get("accelerator_configuration"))
    return cell


def mac_utilisation(macs: int, cycles: int, accelerator: str | None) -> float | None:
    """Achieved MACs per cycle over the accelerator's peak (the number in its name)."""
    try:
        peak = int(str(accelerator).rsplit("_", 1)[-1])
    except ValueError:
        return None
    return macs / (cycles * peak) if cycles else None


def vela_cell(
    tosa_dir: str,
    meta: str,
    target: str,
    system_config: str,
    memory_mode: str,
    vela: dict,
    summary: str,
    per_layer: str,
) -> dict:
    """Run Vela on every partition of a cell; write the aggregated summary and per-layer CSV."""
    recorded = read_json(meta)["partitions"]
    args = standalone_vela_args(target, system_config, memory_mode, vela)
    partitions, layers = [], []
    with tempfile.TemporaryDirectory(prefix="ethosweep-vela-") as tmp:
        for index, partition in enumerate(recorded):
            tosa = Path(tosa_dir) / partition["tosa"]
            verify(tosa, partition["tosa_bytes"], partition["tosa_sha256"], "the lower stage")
            row, layer_rows = run_vela(tosa, args, Path(tmp) / tosa.stem)
            row["partition"] = index
            partitions.append(row)
            layers.extend({"partition": index, **layer} for layer in layer_rows)
    cell = aggregate(partitions)
    record = {
        "source": "Vela compiler estimate (not a measurement)",
        "vela_args": args,
        "cell": cell,
        "partitions": partitions,
        "versions": tool_versions(),
    }
    atomic_write_text(per_layer, _layers_csv(layers))
    write_json(summary, record)
    if cell:
        log.info(
            "Vela estimate: %d cycles total (%d NPU), %.3f ms, SRAM %.1f KiB, off-chip flash %.1f KiB, %d MACs",
            cell["cycles_total"], cell["cycles_npu"], cell["inference_time_ms"], cell["sram_memory_used"],
            cell["off_chip_flash_memory_used"], cell["nn_macs"],
        )
    else:
        log.info("no delegated partitions: nothing runs on the NPU")
    return record


def _layers_csv(rows: list[dict]) -> str:
    if not rows:
        return "partition\n"
    fields = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
