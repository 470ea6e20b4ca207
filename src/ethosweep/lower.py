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
import logging
import tempfile
from pathlib import Path

import torch

from ethosweep.compile_spec import ethosu_compile_spec
from ethosweep.io import atomic_write_bytes, write_json
from ethosweep.jobs import StageError
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


def _vela_reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def lower_program(exported, target: str, system_config: str, memory_mode: str, vela: dict, workdir: Path):
    """Lower a quantized ExportedProgram for one cell: (executorch program, delegation table, Vela calls)."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.backends.cortex_m.passes.replace_quant_nodes_pass import ReplaceQuantNodesPass
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    spec = ethosu_compile_spec(target, system_config, memory_mode, vela)
    with recording_vela_calls(workdir) as calls:
        edge = to_edge_transform_and_lower(
            exported,
            partitioner=[EthosUPartitioner(spec)],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
    edge = edge.transform([ReplaceQuantNodesPass()])
    # Read the delegation table now: to_executorch() adds memory-planning
    # `alloc` nodes to the same graph.
    table = delegation_table(edge)
    program = edge.to_executorch(config=ExecutorchBackendConfig(extract_delegate_segments=False))
    return program, table, calls


def delegation_table(edge) -> dict:
    """Operators on the NPU and on the CPU, as data (ExecuTorch's get_delegation_info)."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge.exported_program().graph_module)
    operators = {
        op: {"npu": b.delegated, "cpu": b.non_delegated}
        for op, b in sorted(info.delegation_by_operator.items())
    }
    cpu_compute = {op: n["cpu"] for op, n in operators.items() if n["cpu"] and op not in BOOKKEEPING_OPS}
    return {
        "partitions": info.num_delegated_subgraphs,
        "npu_ops": info.num_delegated_nodes,
        "cpu_ops": info.num_non_delegated_nodes,
        "cpu_compute_ops": sum(cpu_compute.values()),
        "cpu_operators": cpu_compute,
        "operators": operators,
        "delegated": _delegation_status(info.num_delegated_subgraphs, cpu_compute),
    }


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
                "vela_args": [a for a in call["args"] if not a.startswith("--output-dir")],
                "vela_summary": read_summary(summaries[0]) if summaries else None,
            })
        pte_bytes = program.buffer

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
    if table["cpu_operators"]:
        log.info("operators left on the CPU: %s", ", ".join(f"{op} x{n}" for op, n in table["cpu_operators"].items()))
    return record
