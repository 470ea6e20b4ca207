"""Lowering a quantized program for one TOSA profile with Vela left out, shared by the stages that
lower: the lower stage (once per model, scheme and profile) and the vela stage (again, with what
Vela refused kept on the CPU: ethosweep.vela.compile).

The flow is aot_arm_compiler's (`--delegate --quantize`): to_edge_transform_and_lower with
EthosUPartitioner (and the operator-support checks a model's `keep_on_cpu` asks for), then
ReplaceQuantNodesPass (the CPU-side quantize and dequantize become cortex_m ops), then
to_executorch; each delegate's payload is its TOSA flatbuffer (see ethosweep.compile.lower).
"""

from __future__ import annotations

import contextlib
import logging
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path

from ethosweep.compile.compile_spec import profile_compile_spec
from ethosweep.compile.fx_overheads import without_fx_overheads, without_idle_decompositions
from ethosweep.compile.tosa_graph import output_dtypes
from ethosweep.compile.tosa_sources import node_sources

# Run by ExecuTorch's Arm backend on the lowering's behalf (its TOSA backend writes every partition
# with tosa-tools' serializer): a tosa-tools upgrade reruns whatever lowers (ethosweep.runtime.packages).
ALSO_RUNS = ("tosa-tools",)

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


@contextlib.contextmanager
def vela_left_out():
    """Lower without Vela: each delegate's payload is its TOSA flatbuffer.

    Patches the name EthosUBackend calls (a module attribute). Nothing else in the
    lowered program depends on Vela's output, so the vela stage can put each cell's
    payload in its place later.
    """
    from executorch.backends.arm.arm_vela import VelaCompileResult
    from executorch.backends.arm.ethosu import backend as ethosu_backend

    original = ethosu_backend.vela_compile
    ethosu_backend.vela_compile = lambda tosa, args, **kwargs: VelaCompileResult(bytes(tosa))
    try:
        yield
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

        def wrap_check(self, check, message):
            # a keep_on_cpu check says why in the user's terms, not "Rejected by KeepNode"
            return super().wrap_check(check, getattr(check, "why", None) or message)

    tosa_partitioner.WhyNoPartitionReporter = RecordingReporter
    try:
        yield rejections
    finally:
        tosa_partitioner.WhyNoPartitionReporter = original


def keep_on_cpu_checks(keep_on_cpu: list[dict]) -> list:
    """ExecuTorch's own operator-support checks for what a model keeps on the CPU (`keep_on_cpu`):
    a module path (DontPartitionModule), a node name (DontPartitionName, also matching the nodes the
    lowering derives from an exported node: keep_node), an operator (DontPartition)."""
    from executorch.exir.backend.operator_support import DontPartition, DontPartitionModule

    check_for = {
        "module": lambda name: DontPartitionModule(instance_name=name),
        "node": keep_node,
        "operator": DontPartition,
    }
    checks = []
    for item in keep_on_cpu:
        key = next((k for k in check_for if k in item), None)
        if key is None:
            continue
        check = check_for[key](item[key])
        # why, as the delegation table and the report say it: the fallback's own words ("refused by
        # Vela 5.1.0 on ethos-u55-128"), else the model's keep_on_cpu entry
        check.why = item.get("why") or f"kept on the CPU by the model's keep_on_cpu ({key}: {item[key]})"
        checks.append(check)
    return checks


def keep_node(name: str):
    """ExecuTorch's DontPartitionName for `name`, also matching the nodes that descend from the
    exported model's node of that name (their `from_node` provenance): the names a report shows
    (`conv2d_5`, `add`) are the exported model's, the partitioner sees the edge program's
    (`aten_convolution_default_5`)."""
    from executorch.exir.backend.operator_support import DontPartitionName

    class KeepNode(DontPartitionName):
        def is_node_supported(self, submodules, node) -> bool:
            if node.name == name or name in node_sources(node):
                self.reject_node(node)
                return False
            return True

    return KeepNode(name)


def keeping_partitioner():
    """EthosUPartitioner for a lowering that keeps nodes on the CPU (`keep_on_cpu`, Vela's fallback):
    its boundary quantize/dequantize nodes taken out of the partitions until none is left.

    Why: with an integer-only profile, ExecuTorch's partitioner removes a partition's boundary
    dequantize nodes in one pass over the graph (`_detag_boundary_nodes`), in which it also removes
    a partition's first node when it has a float input from outside. When that node is the only
    user of a dequantize the pass has already kept (MobileNetV2's residual add whose other input
    comes from a convolution kept on the CPU), that dequantize ends the partition, is lowered as a
    float MUL and the lowering fails ("TOSA ... doesn't support float32 for MUL"). Repeating
    ExecuTorch's own rule until nothing changes leaves the dequantize on the CPU, as the rule
    means to. Not applied without kept nodes: the profile's lowering stays ExecuTorch's own.
    """
    from executorch.backends.arm.constants import DQ_OPS, Q_OPS
    from executorch.backends.arm.ethosu import EthosUPartitioner

    class KeepingPartitioner(EthosUPartitioner):
        def _tag_module(self, module, containing_program, reporter, tag_iterator=None):
            tags = super()._tag_module(module, containing_program, reporter, tag_iterator)
            if not (self.tosa_spec.support_integer() and not self.tosa_spec.support_float()):
                return tags
            before = {n.meta["delegation_tag"] for n in module.graph.nodes if "delegation_tag" in n.meta}
            while _untag_boundary_quantization(module.graph, DQ_OPS, Q_OPS):
                pass
            after = {n.meta["delegation_tag"] for n in module.graph.nodes if "delegation_tag" in n.meta}
            return tags - (before - after)  # a partition of only boundary nodes is no partition

    return KeepingPartitioner


def _untag_boundary_quantization(graph, dq_ops, q_ops) -> bool:
    """One pass of ExecuTorch's boundary rule: a dequantize with a user outside its partition, a
    quantize with its input outside, leave the partition. Whether any did."""
    changed = False
    for node in graph.nodes:
        tag = node.meta.get("delegation_tag")
        if tag is None:
            continue
        leaves = node.target in dq_ops and any(user.meta.get("delegation_tag") != tag for user in node.users)
        enters = node.target in q_ops and node.all_input_nodes[0].meta.get("delegation_tag") != tag
        if leaves or enters:
            del node.meta["delegation_tag"]
            changed = True
    return changed


def lower_to_edge(exported, profile: str, keep_on_cpu: list[dict] = ()):
    """(edge program manager with TOSA payloads, the partitioner's rejections)."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    # The profile's representative compile spec: only its TOSA specification shapes the lowered
    # graph; the vela stage replaces the compile specs recorded in the program by each cell's own.
    checks = keep_on_cpu_checks(keep_on_cpu)
    partitioner = (
        keeping_partitioner()(profile_compile_spec(profile), additional_checks=checks)
        if checks
        else EthosUPartitioner(profile_compile_spec(profile))
    )
    with vela_left_out(), recording_rejections() as rejections:
        edge = to_edge_transform_and_lower(
            exported, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
    return edge, rejections


def with_cortex_m_quant_ops(edge):
    """As aot_arm_compiler does: the CPU-side quantize and dequantize become cortex_m ops."""
    from executorch.backends.cortex_m.passes.replace_quant_nodes_pass import ReplaceQuantNodesPass

    return edge.transform([ReplaceQuantNodesPass()])


def to_program(edge):
    """The ExecuTorch program, serialised as aot_arm_compiler serialises it."""
    from executorch.exir import ExecutorchBackendConfig

    return edge.to_executorch(config=ExecutorchBackendConfig(extract_delegate_segments=False))


def _op_type(node_name: str) -> str:
    """A node's operator type as get_delegation_info names it ('aten_avg_pool2d_default_1' -> '..._default')."""
    return re.sub(r"_\d+$", "", node_name)


def delegation_table(edge, rejections: list[tuple[str, str]] = ()) -> dict:
    """Operators on the NPU and on the CPU, as data (ExecuTorch's get_delegation_info),
    with the partitioner's reason for each operator type left on the CPU."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge.exported_program().graph_module)
    operators = {
        op: {"npu": b.delegated, "cpu": b.non_delegated} for op, b in sorted(info.delegation_by_operator.items())
    }
    cpu_compute = {op: n["cpu"] for op, n in operators.items() if n["cpu"] and op not in BOOKKEEPING_OPS}
    reasons: dict[str, str] = {}
    for node_name, reason in rejections:
        op = _op_type(node_name)
        if op in cpu_compute:
            reasons.setdefault(op, short_reason(reason))
    graph = edge.exported_program().graph_module.graph
    return {
        "partitions": info.num_delegated_subgraphs,
        "npu_ops": info.num_delegated_nodes,
        "cpu_ops": info.num_non_delegated_nodes,
        "cpu_compute_ops": sum(cpu_compute.values()),
        "cpu_operators": cpu_compute,
        "cpu_reasons": reasons,
        "operators": operators,
        "delegated": _delegation_status(info.num_delegated_subgraphs, cpu_compute),
        "switches": npu_cpu_switches(graph),
        "cpu_macs": cpu_macs(graph),
        "cpu_tensor_bytes": cpu_tensor_bytes(graph),
        "boundary_mismatches": boundary_mismatches(edge.exported_program().graph_module),
    }


def boundary_mismatches(graph_module) -> list[str]:
    """The NPU outputs the program takes as float while their partition's TOSA gives integers, in
    words. ExecuTorch 1.5 can leave a dequantize and a float operator inside an integer-only
    partition at its exit (a16w8 YOLO on Ethos-U55: dequantize -> split, one half to the CPU); the
    program then describes an int16 buffer as float32, which the device's Ethos-U backend rejects
    (pytorch/executorch#19364; fixed upstream by keeping such boundaries quantized, #22966)."""
    found = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or "executorch_call_delegate" not in str(node.target):
            continue
        lowered = getattr(graph_module, node.args[0].target)
        values = node.meta.get("val")
        values = values if isinstance(values, (list, tuple)) else [values]
        takers = {user.args[1]: user for user in node.users if user.target is operator.getitem}
        for index, (value, given) in enumerate(zip(values, output_dtypes(lowered.processed_bytes))):
            if hasattr(value, "dtype") and value.dtype.is_floating_point and given.startswith("INT"):
                taker = takers.get(index)
                users = list(taker.users) if taker is not None else []
                into = ", ".join(u.name for u in users) or "the program's output"
                found.append(
                    f"NPU output {node.name}[{index}] taken as {str(value.dtype).removeprefix('torch.')}, "
                    f"given as {given.lower()} (into {into}{''.join(code_line(u) for u in users[:1])})"
                )
    return found


def code_line(node) -> str:
    """' at ultralytics/nn/modules/block.py:1491: a, b = ...' : the model's line a node comes from, or ''."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.+)', node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    path, line, code = frames[-1]
    short = "/".join(path.split("/site-packages/")[-1].split("/")[-4:])
    return f" at {short}:{line}: {code.strip()}"


def _is_cpu_compute(node) -> bool:
    return (
        node.op == "call_function"
        and "executorch_call_delegate" not in str(node.target)
        and _op_type(node.name) not in BOOKKEEPING_OPS
    )


def npu_cpu_switches(graph) -> int:
    """How often the program passes between the NPU and the CPU, in execution order (each costs a
    hand-over of tensors through memory): 0 for a model that runs on one of them."""
    sides = []
    for node in graph.nodes:
        side = "npu" if "executorch_call_delegate" in str(node.target) else "cpu" if _is_cpu_compute(node) else None
        if side and (not sides or sides[-1] != side):
            sides.append(side)
    return max(0, len(sides) - 1)


def cpu_macs(graph) -> int:
    """Multiply-accumulates of the compute left on the CPU (convolutions, transposed ones too, linear
    layers, matrix products; a pool's or a mean's sums count as accumulates), from the tensors'
    shapes: what the NPU does not take off the CPU."""
    return int(sum(_node_macs(node) for node in graph.nodes if _is_cpu_compute(node)))


def _node_macs(node) -> int:
    name, out = str(node.target), node.meta.get("val")
    if not hasattr(out, "numel"):
        return 0
    source = _value(node.args[0]) if node.args else None
    if re.search(r"adaptive_avg_pool|\bmean\.dim|\bsum\.dim", name) and source is not None:
        return source.numel()  # every input value summed once, whatever the output's size
    if "avg_pool" in name and len(node.args) > 1:  # kernel_size: a sum over each window
        return out.numel() * math.prod(node.args[1])
    position = 2 if "addmm" in name else 1  # addmm(bias, a, b): the reduced dimension is b's first
    weight = _value(node.args[position]) if len(node.args) > position else None
    if weight is None or not hasattr(weight, "shape"):
        return 0
    if re.search(r"convolution|conv[123]d|conv_transpose", name) and weight.dim() >= 3:
        # the edge dialect's convolution(..., transposed, ...), or the aten graph's conv_transpose2d
        transposed = "conv_transpose" in name or (len(node.args) > 6 and node.args[6] is True)
        if transposed and source is not None:  # weight [C_in, C_out / groups, k...]: each input to every tap
            return source.numel() * weight.shape[1] * math.prod(weight.shape[2:])
        return out.numel() * weight.shape[1] * math.prod(weight.shape[2:])
    if "linear" in name or re.search(r"\b(bmm|mm|addmm|matmul)\.default", name):
        return out.numel() * (weight.shape[-1] if "linear" in name else weight.shape[-2])
    return 0


def _value(argument):
    return argument.meta.get("val") if hasattr(argument, "meta") else None


def cpu_tensor_bytes(graph) -> int:
    """Bytes the compute left on the CPU reads and writes (each operator's input and output tensors,
    from their shapes and types): the memory traffic the CPU part costs, beside its MACs."""
    total = 0
    for node in graph.nodes:
        if not _is_cpu_compute(node):
            continue
        for value in [node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)]:
            if hasattr(value, "numel") and hasattr(value, "element_size"):
                total += value.numel() * value.element_size()
    return int(total)


def short_reason(reason: str, limit: int = 160) -> str:
    """A partitioner's reason on one line, without the operator schema some reasons append."""
    text = " ".join(reason.split()).split(": schema =")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _delegation_status(partitions: int, cpu_compute: dict) -> str:
    if partitions == 0:
        return "none"
    return "partial" if cpu_compute else "full"


def delegate_payloads(program_bytes: bytes) -> list[bytes]:
    """Each delegate's payload in a .pte, in execution order (in the template: its TOSA)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(program_bytes).program
    return [
        bytes(program.backend_delegate_data[d.processed.index].data)
        for plan in program.execution_plan
        for d in plan.delegates
    ]


@dataclass
class Lowered:
    """A quantized program lowered for one TOSA profile, Vela left out."""

    template: bytes  # the program, each delegate carrying its TOSA
    edge: bytes  # the edge program as the partitioner left it (the verify stage runs it)
    table: dict  # delegation_table()
    planned: int  # bytes ExecuTorch's memory plan needs outside the delegates
    sources: list  # per partition, where each TOSA tensor comes from (ethosweep.compile.tosa_sources)


def lower_quantized(quantized: str, profile: str, keep_on_cpu: list[dict] = ()) -> Lowered:
    """lower_program on a quantized program's file. With a store set (ethosweep.runtime.cache), taken
    from it when it holds the same lowering: the same program bytes, profile and operators kept on
    the CPU, the same lowering code and tool versions. A fallback's lowering repeats in every cell
    whose Vela refuses the same operators (each memory mode, every target of the profile) and in
    its verification: once in the store, it is lowered once. Without a store, a fallback's lowering
    is kept in a store of the quantized program's own folder (`fallbacks/` beside it): ExecuTorch's
    lowering of the same program is not the same bytes in every process, and the cells and their
    verification must share one for the verification to hold for the cells."""
    import json

    from ethosweep.compile.artifacts import load_quantized
    from ethosweep.runtime import cache
    from ethosweep.runtime.codeversion import code_version
    from ethosweep.runtime.packages import stage_versions

    def lowered_now() -> dict[str, bytes]:
        lowered = lower_program(load_quantized(quantized), profile, keep_on_cpu)
        record = {"table": lowered.table, "planned": lowered.planned, "sources": lowered.sources}
        return {"template": lowered.template, "edge": lowered.edge, "record": json.dumps(record).encode()}

    parts = {
        "program": cache.content_digest(quantized),
        "profile": profile,
        "keep_on_cpu": list(keep_on_cpu),
        "code": code_version("ethosweep.compile.delegation"),
        # every package the lowering runs, as the lowering rule's key has them
        "tools": stage_versions("ethosweep.compile.lower"),
    }
    own = Path(quantized).parent / "fallbacks" if keep_on_cpu else None
    blobs = cache.remembered("lowering", parts, lowered_now, own)
    record = json.loads(blobs["record"])
    return Lowered(blobs["template"], blobs["edge"], record["table"], record["planned"], record["sources"])


@without_fx_overheads()  # the same bytes, without what torch.fx spends on them for nothing
@without_idle_decompositions()  # the same program, without a re-trace that has nothing to do
def lower_program(exported, profile: str, keep_on_cpu: list[dict] = ()) -> Lowered:
    """The lowering every stage that lowers runs (the lower stage; the vela stage's fallback)."""
    from executorch.exir.serde.serialize import save as save_edge

    from ethosweep.compile.tosa_sources import recording_tensor_sources
    from ethosweep.matrix import targets as tg
    from ethosweep.runtime.activity import running
    from ethosweep.runtime.errors import StageError

    try:
        with (
            running("ExecuTorch's Arm lowering", f"partitioning and lowering to {tg.tosa_spec(profile)}"),
            recording_tensor_sources() as sources,
        ):
            lowered, rejections = lower_to_edge(exported, profile, keep_on_cpu)
    except Exception as error:
        log.error("the lowering raised:", exc_info=True)  # the traceback, for the log
        cause = root_cause(error)
        raise StageError(
            f"lowering to TOSA ({tg.tosa_spec(profile)}) failed: {type(cause).__name__}: "
            f"{' '.join(str(cause).split())[:300]}"
        ) from error
    # The verify stage runs the edge program as the partitioner left it (quantized_decomposed
    # ops run in PyTorch); the delegation table is read after the cortex_m pass, whose
    # quantize ops it counts as bookkeeping, and before to_executorch() adds memory-planning
    # `alloc` nodes to the same graph.
    edge = _serialised(lambda f: save_edge(lowered.exported_program(), f))
    lowered = with_cortex_m_quant_ops(lowered)
    table = delegation_table(lowered, rejections)
    with running("ExecuTorch's to_executorch", "planning memory and serialising the program"):
        program = to_program(lowered)
    plan = program.executorch_program.execution_plan[0]
    # ExecuTorch's memory plan for tensors outside the delegates (the runner's method
    # allocator must hold them): buffer 0 is reserved and always 0.
    planned = sum(int(size) for size in plan.non_const_buffer_sizes)
    return Lowered(bytes(program.buffer), edge, table, planned, sources)


def root_cause(error: BaseException) -> BaseException:
    """The exception at the bottom of a chain: ExecuTorch's pass manager wraps a pass's error in one
    that lists every pass run before it, which says nothing of what went wrong."""
    while error.__cause__ is not None and error.__cause__ is not error:
        error = error.__cause__
    return error


def _serialised(save) -> bytes:
    import io

    buffer = io.BytesIO()
    save(buffer)
    return buffer.getvalue()
