"""Stage 4, vela: per cell, one Vela run per partition and the cell's .pte.

The lower stage keeps each (model, scheme, TOSA profile)'s program with the TOSA of
every delegated partition as its payload (the *template*). For a cell this stage
1. compiles each partition's TOSA with ExecuTorch's own Vela entry point
   (`executorch.backends.arm.arm_vela.vela_compile`, what EthosUBackend.preprocess calls)
   and the cell's Vela flags, so the payload is the one the Ethos-U backend embeds;
   `--verbose-performance` makes the same run write the per-layer CSV and the summary;
2. puts the payloads and the cell's compile specs into the template and serialises it
   with ExecuTorch's .pte serialiser: byte-identical to what to_edge_transform_and_lower
   with EthosUPartitioner gives for the cell (tests/test_compile_once.py).

Vela runs in a forked child (ethosweep.runtime.isolation): a crash in its native compiler fails
this cell with the signal's name, and the partition's TOSA, the vela.ini and the exact
command line are kept in `repro/` beside the cell's outputs to reproduce it outside the sweep.

A cell of another Vela version than the installed one (`vela: {versions: [...]}`) runs that
version's `vela` command from its own environment (ethosweep.vela.environment) as a separate
process, with the same flags on the same TOSA, inside the same `vela_compile`: only the call
of Vela's `main` is replaced, so its output is packed into the payload by ExecuTorch's own code.

All numbers are Vela's *compiler estimates* (its performance model), not measurements.
Cell figures from several partitions: the partitions run one after another, so cycles,
MACs, inference time and off-chip/flash traffic add up, while the SRAM arena is reused
by each in turn, so the cell's SRAM need is the largest partition's. Weights and command
streams are stored side by side, so flash and DRAM use add up.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from ethosweep.compile.compile_spec import cell_compile_specs, vela_flags
from ethosweep.compile.delegation import delegate_payloads
from ethosweep.firmware.kernels import check_kernels
from ethosweep.matrix.cell import Cell
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.integrity import verify
from ethosweep.runtime.io import atomic_write_bytes, atomic_write_text, read_json, write_json
from ethosweep.runtime.provenance import tool_versions
from ethosweep.vela.fallback import compile_by_fallback
from ethosweep.vela.partitions import VelaFailure, VelaRun

log = logging.getLogger(__name__)

# Run through ExecuTorch's vela_compile, never imported here: a Vela upgrade reruns this stage
# (ethosweep.runtime.packages). A cell of another Vela version runs that version instead.
ALSO_RUNS = ("ethos-u-vela",)

# Summary fields that add up over partitions, and those where the cell needs the largest.
SUMMED = (
    "cycles_total",
    "cycles_npu",
    "cycles_sram_access",
    "cycles_dram_access",
    "cycles_on_chip_flash_access",
    "cycles_off_chip_flash_access",
    "nn_macs",
    "inference_time",
    "dram_memory_used",
    "on_chip_flash_memory_used",
    "off_chip_flash_memory_used",
    "total_original_weights",
    "total_npu_encoded_weights",
    "sram_total_bytes",
    "dram_total_bytes",
    "on_chip_flash_total_bytes",
    "off_chip_flash_total_bytes",
)
PEAK = ("sram_memory_used",)
SHARED = (
    "accelerator_configuration",
    "system_config",
    "memory_mode",
    "core_clock",
    "arena_cache_size",
    "weights_storage_area",
    "feature_map_storage_area",
)


# ---- a cell's figures -----------------------------------------------------------------


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
    cell["mac_utilisation"] = mac_utilisation(
        cell["nn_macs"], cell["cycles_total"], partitions[0].get("accelerator_configuration")
    )
    return cell


# The operators the lowering adds to move data between layouts rather than compute: ExecuTorch's Arm
# backend converts NCHW to NHWC with TRANSPOSEs inside the delegate (pytorch/executorch#17157), and
# Vela lists each, and any RESCALE it could not fuse, as a layer of its own.
LAYOUT_OPERATORS = {"Transpose": "transposes", "Rescale": "rescales"}


def layout_work(layers: list[dict], cycles_total: int | None) -> dict:
    """{"transposes": n, "transposes_cycles": c, "transposes_share": c / cycles_total, ...} from Vela's
    per-layer report: what the NPU spends on layout, beside the compute ("100 % on the NPU" hides it)."""
    work = {}
    for operator, name in LAYOUT_OPERATORS.items():
        rows = [layer for layer in layers if layer.get("NNG Operator") == operator]
        cycles = sum(layer.get("Op Cycles") or 0 for layer in rows)
        work[name] = len(rows)
        work[f"{name}_cycles"] = cycles
        work[f"{name}_share"] = round(cycles / cycles_total, 6) if cycles_total else None
    return work


def mac_utilisation(macs: int, cycles: int, accelerator: str | None) -> float | None:
    """Achieved MACs per cycle over the accelerator's peak (the number in its name)."""
    try:
        peak = int(str(accelerator).rsplit("_", 1)[-1])
    except ValueError:
        return None
    return macs / (cycles * peak) if cycles else None


def _layers_csv(rows: list[dict]) -> str:
    if not rows:
        return "partition\n"
    fields = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


# ---- the cell's .pte --------------------------------------------------------------------


def assemble_pte(template: bytes, payloads: list[bytes], compile_specs: list[tuple[str, bytes]]) -> bytes:
    """The template with each delegate's payload and compile specs replaced, serialised.

    Delegate data is shared between delegates with identical payloads, in order of first
    use, as ExecuTorch's emitter does (it keys them by a hash of the payload).
    """
    from executorch.exir import schema
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    pte = deserialize_pte_binary(template)
    program = pte.program
    delegates = [d for plan in program.execution_plan for d in plan.delegates]
    if len(delegates) != len(payloads):
        raise StageError(f"the template has {len(delegates)} delegates, but {len(payloads)} payloads were compiled")
    index_of: dict[bytes, int] = {}
    data = []
    for delegate, payload in zip(delegates, payloads):
        key = hashlib.sha256(payload).digest()
        if key not in index_of:
            index_of[key] = len(data)
            data.append(schema.BackendDelegateInlineData(data=payload))
        delegate.processed = schema.BackendDelegateDataReference(
            location=delegate.processed.location, index=index_of[key]
        )
        delegate.compile_specs = [schema.CompileSpec(key=k, value=v) for k, v in compile_specs]
    program.backend_delegate_data = data
    return bytes(serialize_pte_binary(pte))


def program_operators(pte: bytes) -> list[str]:
    """'namespace::name.overload' of every operator the program runs outside its delegates."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte).program
    return list(
        dict.fromkeys(
            f"{op.name}.{op.overload}" if op.overload else op.name
            for plan in program.execution_plan
            for op in plan.operators
        )
    )


def scratch_bytes(payloads: list[bytes]) -> int:
    """The largest Ethos-U scratch buffer the cell's delegates ask for (the command stream's
    `scratch_size` block), read with ExecuTorch's own reader (get_ethosu_scratch_from_pte, which
    reads the same payloads back out of the .pte)."""
    from executorch.backends.arm.scripts.get_ethosu_scratch_from_pte import get_scratch_size_from_delegate

    return max((get_scratch_size_from_delegate(p) or 0 for p in payloads), default=0)


# ---- the stage ------------------------------------------------------------------------


def compile_cell(
    lowering: Lowering, cell: Cell, files: CellFiles, vela_env: str | None = None, fallback: bool | None = None
) -> dict:
    """Compile one cell: Vela on every partition, the cell's .pte, Vela's reports, metadata.

    `vela_env`: for a cell of another Vela version than the installed one, the env.json of its
    environment (ethosweep.vela.environment).
    `fallback`: when Vela refuses operators and it is on (default: the cell's `vela.fallback`, on
    unless the config turns it off), the quantized program is lowered again for the profile with them
    kept on the CPU (beside what the model's config keeps there), and the cell compiles from that
    lowering (ethosweep.vela.fallback).
    """
    vela, vela_version = cell.vela.as_params(), cell.vela_version
    fallback = cell.vela.fallback if fallback is None else fallback
    environment = _vela_environment(vela_env, vela_version)
    versions = {**tool_versions(), "vela": vela_version or tool_versions()["vela"]}
    lowered = read_json(lowering.lower_meta)
    template = verify(lowering.template, lowered["template_bytes"], lowered["template_sha256"], "the lower stage")
    program = Program.of_template(template, lowered)
    environment_vela = environment["vela"] if environment else None
    # without a store, the refusal search's seeds are kept beside the partitions they were found in
    searches = Path(lowering.lower_meta).parent / "searches"
    run = VelaRun(vela_flags(cell), cell.where, environment_vela, vela_version, Path(files.repro), vela, searches)
    sources = read_json(lowering.tosa_sources) if lowering.tosa_sources else None
    try:
        compiled = Compiled(program, *run.compile_all(program.tosas, sources))
    except VelaFailure as refused:
        if not (fallback and lowering.quantized and refused.kept_nodes):
            raise
        kept = list(lowering.keep_on_cpu)
        fell_back = compile_by_fallback(refused, lowering.quantized, lowering.profile, kept, run, versions["vela"])
        compiled = Compiled(Program.of_fallback(fell_back), fell_back.payloads, fell_back.rows, fell_back.layers)
        compiled.fallback = fell_back.record
    pte_bytes = assemble_pte(compiled.program.template, compiled.payloads, cell_compile_specs(cell))
    if compiled.fallback is None:  # a reproducer of an earlier failure no longer applies
        shutil.rmtree(files.repro, ignore_errors=True)
    record = _write_cell(files, cell, compiled, pte_bytes, versions, environment)
    _log_estimate(aggregate(compiled.rows), len(pte_bytes))
    return record


@dataclass(frozen=True)
class Lowering:
    """What a cell compiles from: the lower stage's template program and record; the record of where
    each TOSA tensor comes from, to name what Vela refuses in the model's terms
    (ethosweep.vela.refusals); and for a fallback, the quantized program, its TOSA profile and what
    the model's config keeps on the CPU."""

    template: str
    lower_meta: str
    tosa_sources: str | None = None
    quantized: str | None = None
    profile: str | None = None
    keep_on_cpu: list[dict] = ()


@dataclass(frozen=True)
class CellFiles:
    """What the Vela job writes for a cell; `repro`: the folder a Vela failure leaves its reproducer in
    (removed after a success)."""

    pte: str
    summary: str
    per_layer: str
    meta: str
    repro: str


@dataclass
class Program:
    """What a cell compiles: the template program, its TOSA partitions, and what the lowering recorded
    of it (the profile's lowering, or the fallback's)."""

    template: bytes
    tosas: list[bytes]
    planned_buffer_bytes: int
    delegated: str
    template_sha256: str

    @classmethod
    def of_template(cls, template: bytes, lowered: dict) -> "Program":
        planned, delegated = lowered["planned_buffer_bytes"], lowered["delegated"]
        return cls(template, delegate_payloads(template), planned, delegated, lowered["template_sha256"])

    @classmethod
    def of_fallback(cls, fell_back) -> "Program":
        sha256 = hashlib.sha256(fell_back.template).hexdigest()
        return cls(fell_back.template, fell_back.tosas, fell_back.planned_buffer_bytes, fell_back.delegated, sha256)


@dataclass
class Compiled:
    """Vela's results on a program's partitions, and what the fallback recorded if the cell fell back."""

    program: Program
    payloads: list[bytes]
    rows: list[dict]
    layers: list[dict]
    fallback: dict | None = None


def _vela_environment(vela_env: str | None, vela_version: str | None) -> dict | None:
    """Another Vela version's environment record (ethosweep.vela.environment), checked."""
    if vela_version is None:
        return None
    environment = read_json(vela_env)
    if environment["version"] != vela_version:
        raise StageError(f"{vela_env} holds Vela {environment['version']}, not {vela_version}: delete it and rerun")
    return environment


def _write_cell(
    outputs: CellFiles,
    cell: Cell,
    compiled: Compiled,
    pte_bytes: bytes,
    versions: dict,
    environment: dict | None,
) -> dict:
    """The cell's outputs: Vela's reports (summary.json, per_layer.csv), the .pte and its record (with
    the CPU kernels its operators need: ethosweep.firmware.kernels)."""
    fallback = {"fallback": compiled.fallback} if compiled.fallback else {}
    kernels = check_kernels(program_operators(pte_bytes))
    figures = aggregate(compiled.rows)
    if figures:
        figures["layout"] = layout_work(compiled.layers, figures["cycles_total"])
    atomic_write_text(outputs.per_layer, _layers_csv(compiled.layers))
    write_json(
        outputs.summary,
        {
            "source": "Vela compiler estimate (not a measurement)",
            "vela_flags": vela_flags(cell),
            "cell": figures,
            "partitions": compiled.rows,
            "cpu_kernels": kernels,
            "versions": versions,
            **fallback,
        },
    )
    atomic_write_bytes(outputs.pte, pte_bytes)
    program = compiled.program
    record = {
        "target": cell.target,
        "system_config": cell.system_config,
        "memory_mode": cell.memory_mode,
        "vela_options": cell.vela.as_params(),
        "vela_flags": vela_flags(cell),
        "pte_bytes": len(pte_bytes),
        "pte_sha256": hashlib.sha256(pte_bytes).hexdigest(),
        "planned_buffer_bytes": program.planned_buffer_bytes,
        # the runner's scratch pool holds the largest (ethosweep.firmware reads it here, torch-free)
        "scratch_bytes": scratch_bytes(compiled.payloads),
        "template_sha256": program.template_sha256,
        # the TOSA this cell's payloads were compiled from (a fallback's own lowering's, where it fell back)
        "partitions": [
            {"index": i, "tosa_sha256": hashlib.sha256(t).hexdigest(), "payload_bytes": len(p)}
            for i, (t, p) in enumerate(zip(program.tosas, compiled.payloads))
        ],
        "delegated": program.delegated,
        # whether the runner can run what the program leaves on the CPU: the kernel library of each
        # operator, and those no library has (the program would fail at load)
        "cpu_kernels": kernels,
        "versions": versions,
        # what Vela refused and kept on the CPU, when the cell compiled from a lowering without it
        **fallback,
        # the environment another Vela version ran from: its lock pins every package
        **({"vela_environment": {k: environment[k] for k in ("lock_sha256", "packages")}} if environment else {}),
    }
    write_json(outputs.meta, record)
    return record


def _log_estimate(cell: dict, pte_bytes: int) -> None:
    if not cell:
        log.info("no delegated partitions: nothing runs on the NPU; .pte %d bytes", pte_bytes)
        return
    log.info(
        "Vela estimate: %d cycles total (%d NPU), %.3f ms, SRAM %.1f KiB, off-chip flash %.1f KiB, %d MACs; .pte "
        "%d bytes",
        cell["cycles_total"],
        cell["cycles_npu"],
        cell["inference_time_ms"],
        cell["sram_memory_used"],
        cell["off_chip_flash_memory_used"],
        cell["nn_macs"],
        pte_bytes,
    )
