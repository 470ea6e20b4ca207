"""Stage 3, lower: EthosUPartitioner -> TOSA -> Vela -> .pte, per cell.

The flow is aot_arm_compiler's (`--delegate --quantize`): to_edge_transform_and_lower
with EthosUPartitioner, then ReplaceQuantNodesPass (the CPU-side quantize and
dequantize become cortex_m ops, as the bare-metal runner expects), then
to_executorch. Besides the .pte it keeps what a user needs to understand the
cell: the TOSA flatbuffer of every delegated partition, Vela's own summary of
each, and the delegation table (which operators run on the NPU, which stay on
the CPU).

Partitions: a model can lower to several delegates. ExecuTorch writes Vela's
files to fixed names in its intermediates folder, so the last partition would
overwrite the others; ethosweep instead records each call into Vela.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import tempfile
from pathlib import Path

import torch

from ethosweep.compile_spec import ethosu_compile_spec
from ethosweep.io import atomic_write_bytes, write_json
from ethosweep.errors import StageError
from ethosweep.provenance import tool_versions
from ethosweep.quantize import load_quantized
from ethosweep.vela import read_summary

log = logging.getLogger(__name__)

# Operators that appear outside every delegate without doing any compute:
# the int8 <-> float boundary and tuple unpacking.
BOOKKEEPING_OPS = {
    "getitem",
    "quantize_per_tensor",
    "dequantize_per_tensor",
    "quantize_per_tensor_default",
    "dequantize_per_tensor_default",
    "cortex_m_quantize_per_tensor_default",
    "cortex_m_dequantize_per_tensor_default",
}


class VelaError(StageError):
    pass


@contextlib.contextmanager
def recording_vela_calls(workdir: Path):
    """Record every partition ExecuTorch hands to Vela: its TOSA and Vela's summary.

    Patches the name EthosUBackend calls (a module attribute), so each
    partition's Vela run gets its own folder instead of the shared
    intermediates path, and the .pte's compile specs stay free of temp paths.
    """
    from executorch.backends.arm.ethosu import backend as ethosu_backend

    original = ethosu_backend.vela_compile
    calls: list[dict] = []

    def vela_compile(tosa_flatbuffer, args, verbose=False, intermediate_path=None, block_placements=None):
        folder = workdir / f"partition_{len(calls)}"
        folder.mkdir(parents=True)
        call = {"tosa": bytes(tosa_flatbuffer), "args": list(args), "folder": folder}
        calls.append(call)
        try:
            return original(tosa_flatbuffer, args, verbose=False, intermediate_path=str(folder), block_placements=block_placements)
        except BaseException as error:
            raise VelaError(f"Vela failed on partition {len(calls) - 1}: {_vela_reason(error)}") from error

    ethosu_backend.vela_compile = vela_compile
    try:
        yield calls
    finally:
        ethosu_backend.vela_compile = original


@contextlib.contextmanager
def recording_rejections():
    """Record why the partitioner left each node on the CPU (its WhyNoPartitionReporter)."""
    from executorch.backends.arm.tosa import partitioner as tosa_partitioner

    original = tosa_partitioner.WhyNoPartitionReporter
    rejections: list[tuple[str, str]] = []

    class RecordingReporter(original):
        def report_reject(self, node, reason):
            if node.op not in ("placeholder", "output"):
                rejections.append((node.name, reason))
            super().report_reject(node, reason)

    tosa_partitioner.WhyNoPartitionReporter = RecordingReporter
    try:
        yield rejections
    finally:
        tosa_partitioner.WhyNoPartitionReporter = original


def _op_type(node_name: str) -> str:
    """A node's operator type as get_delegation_info names it ('aten_avg_pool2d_default_1' -> '..._default')."""
    return re.sub(r"_\d+$", "", node_name)


def _vela_reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def lower_program(exported, target: str, system_config: str, memory_mode: str, vela: dict, workdir: Path):
    """Lower a quantized ExportedProgram for one cell: (executorch program, delegation table, Vela calls)."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.backends.cortex_m.passes.replace_quant_nodes_pass import ReplaceQuantNodesPass
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    spec = ethosu_compile_spec(target, system_config, memory_mode, vela)
    with recording_vela_calls(workdir) as calls, recording_rejections() as rejections:
        edge = to_edge_transform_and_lower(
            exported,
            partitioner=[EthosUPartitioner(spec)],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
    edge = edge.transform([ReplaceQuantNodesPass()])
    # Read the delegation table now: to_executorch() adds memory-planning
    # `alloc` nodes to the same graph.
    table = delegation_table(edge, rejections)
    program = edge.to_executorch(config=ExecutorchBackendConfig(extract_delegate_segments=False))
    return program, table, calls


def delegation_table(edge, rejections: list[tuple[str, str]] = ()) -> dict:
    """Operators on the NPU and on the CPU, as data (ExecuTorch's get_delegation_info),
    with the partitioner's reason for each operator type left on the CPU."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge.exported_program().graph_module)
    operators = {
        op: {"npu": b.delegated, "cpu": b.non_delegated}
        for op, b in sorted(info.delegation_by_operator.items())
    }
    cpu_compute = {op: n["cpu"] for op, n in operators.items() if n["cpu"] and op not in BOOKKEEPING_OPS}
    reasons: dict[str, str] = {}
    for node_name, reason in rejections:
        op = _op_type(node_name)
        if op in cpu_compute:
            reasons.setdefault(op, short_reason(reason))
    return {
        "partitions": info.num_delegated_subgraphs,
        "npu_ops": info.num_delegated_nodes,
        "cpu_ops": info.num_non_delegated_nodes,
        "cpu_compute_ops": sum(cpu_compute.values()),
        "cpu_operators": cpu_compute,
        "cpu_reasons": reasons,
        "operators": operators,
        "delegated": _delegation_status(info.num_delegated_subgraphs, cpu_compute),
    }


def short_reason(reason: str, limit: int = 160) -> str:
    """A partitioner's reason on one line, without the operator schema some reasons append."""
    text = " ".join(reason.split()).split(": schema =")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _delegation_status(partitions: int, cpu_compute: dict) -> str:
    if partitions == 0:
        return "none"
    return "partial" if cpu_compute else "full"


def lower_cell(
    quantized: str,
    target: str,
    system_config: str,
    memory_mode: str,
    vela: dict,
    pte: str,
    tosa_dir: str,
    delegation: str,
    meta: str,
) -> dict:
    """Lower one cell; write the .pte, each partition's TOSA, the delegation table and metadata."""
    exported = load_quantized(quantized)
    with tempfile.TemporaryDirectory(prefix="ethosweep-lower-") as tmp:
        program, table, calls = lower_program(exported, target, system_config, memory_mode, vela, Path(tmp))
        partitions = []
        for index, call in enumerate(calls):
            summaries = sorted(call["folder"].glob("output/out_summary_*.csv"))
            partitions.append({
                "index": index,
                "tosa": f"partition_{index}.tosa",
                "tosa_bytes": len(call["tosa"]),
                "tosa_sha256": hashlib.sha256(call["tosa"]).hexdigest(),
                "vela_args": [a for a in call["args"] if not a.startswith("--output-dir")],
                "vela_summary": read_summary(summaries[0]) if summaries else None,
            })
        pte_bytes = program.buffer
        plan = program.executorch_program.execution_plan[0]
        # ExecuTorch's memory plan for tensors outside the delegates (the runner's method
        # allocator must hold them): buffer 0 is reserved and always 0.
        planned = sum(int(size) for size in plan.non_const_buffer_sizes)

    tosa_path = Path(tosa_dir)
    tosa_path.mkdir(parents=True, exist_ok=True)
    for index, call in enumerate(calls):
        atomic_write_bytes(tosa_path / f"partition_{index}.tosa", call["tosa"])
    write_json(delegation, table)
    atomic_write_bytes(pte, pte_bytes)
    record = {
        "target": target,
        "system_config": system_config,
        "memory_mode": memory_mode,
        "vela_options": vela,
        "pte_bytes": len(pte_bytes),
        "pte_sha256": hashlib.sha256(pte_bytes).hexdigest(),
        "planned_buffer_bytes": planned,
        "partitions": partitions,
        "delegated": table["delegated"],
        "versions": tool_versions(),
    }
    write_json(meta, record)
    cycles = sum((p["vela_summary"] or {}).get("cycles_total", 0) for p in partitions)
    log.info(
        "lowered: %d partition(s), %s delegation, .pte %d bytes, Vela estimate %d cycles",
        len(partitions), table["delegated"], len(pte_bytes), cycles,
    )
    for op, count in table["cpu_operators"].items():
        log.info("left on the CPU: %s x%d (%s)", op, count, table["cpu_reasons"].get(op, "no reason reported"))
    return record
