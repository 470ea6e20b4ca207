"""CPU-only cells: a model for a Cortex-M CPU alone, no Ethos-U (the baseline the NPU is judged by).

The flow is aot_arm_compiler's `--target=cortex-m55 --quantize` (ExecuTorch 1.5): the model in
channels-last, PT2E with CortexMQuantizer, to_edge_transform_and_lower with the Cortex-M edge
config, CortexMPassManager (quantized operators become cortex_m:: CMSIS-NN kernels; what CMSIS-NN
lacks stays a portable kernel), to_executorch. Keyed by (model, scheme, CPU).

Besides the .pte the stage writes what the firmware run is checked against: one real input (the
first held-out dataset sample, else the model's example inputs: never a tensor of ones) as the
bytes the .pte expects, and the outputs the lowered graph gives for it in PyTorch (the cortex_m
operators have reference implementations), plus the float model's outputs.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import torch

from ethosweep.compile.artifacts import Calibration, calibration_set, evaluation_set, load_tensors
from ethosweep.matrix.targets import CPU_SCHEMES, CPU_TARGETS
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.io import atomic_write_bytes, write_json
from ethosweep.runtime.provenance import tool_versions

log = logging.getLogger(__name__)


def channels_last(x):
    return x.to(memory_format=torch.channels_last) if isinstance(x, torch.Tensor) and x.dim() == 4 else x


def lower_for_cortex_m(float_module, example_inputs: tuple, calibration: list[tuple], cpu: str):
    """(edge program manager after the Cortex-M passes, quantized module): aot_arm_compiler's path."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexMTargetConfig
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    inputs = tuple(channels_last(x) for x in example_inputs)
    # CMSIS-NN kernels read NHWC: re-export after the memory-format change so the quantizer sees it.
    module = torch.export.export(float_module.to(memory_format=torch.channels_last), inputs).module(check_guards=False)
    prepared = prepare_pt2e(module, CortexMQuantizer())
    with torch.no_grad():
        for sample in calibration:
            prepared(*(channels_last(x) for x in sample))
    quantized = convert_pt2e(prepared)
    edge = to_edge_transform_and_lower(
        torch.export.export(quantized, inputs), compile_config=cortex_m_edge_compile_config()
    )
    passes = CortexMPassManager(edge.exported_program(), target_config=CortexMTargetConfig.from_target_string(cpu))
    edge._edge_programs["forward"] = passes.transform()
    return edge, quantized


def operator_table(graph_module) -> dict[str, int]:
    """Operator -> count in the lowered graph ('cortex_m::quantized_conv2d', 'aten::view_copy', ...)."""
    counts: Counter = Counter()
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "_name", None) or getattr(getattr(node.target, "_op", None), "_name", None)
        if name is None:
            name = getattr(node.target, "__name__", str(node.target))
        if name in ("alloc", "getitem"):  # memory planning and tuple unpacking, not kernels
            continue
        counts[str(name).split(".")[0] if "::" in str(name) else str(name)] += 1
    return dict(sorted(counts.items()))


def output_scales(graph_module) -> list[float | None]:
    """Each output's quantization step: the scale of the dequantize that produces it, if one does."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    scales = []
    for value in output.args[0]:
        producer = getattr(value, "target", None)
        is_dequant = "dequantize_per_tensor" in str(producer)
        scales.append(float(value.args[1]) if is_dequant else None)
    return scales


# cortex_m operators that only convert at the float/int8 boundary (no CMSIS-NN compute).
BOUNDARY_OPS = ("cortex_m::quantize_per_tensor", "cortex_m::dequantize_per_tensor")


def is_cmsis_nn_kernel(op: str) -> bool:
    """A cortex_m:: compute operator (convolution, linear, add, pooling, softmax, ...)."""
    return op.startswith("cortex_m::") and op not in BOUNDARY_OPS


def input_bytes(inputs: tuple, placeholders: list) -> bytes:
    """The inputs as the .pte lays them out in memory (its dim order: NHWC for 4-D inputs here)."""
    chunks = []
    for value, placeholder in zip(inputs, placeholders):
        dim_order = placeholder.meta["val"].dim_order()
        chunks.append(value.permute(*dim_order).contiguous().numpy().tobytes())
    return b"".join(chunks)


def _user_input_placeholders(exported) -> list:
    user_inputs = set(exported.graph_signature.user_inputs)
    return [n for n in exported.graph_module.graph.nodes if n.op == "placeholder" and n.name in user_inputs]


@dataclass(frozen=True)
class CpuCellFiles:
    """What the Cortex-M stage writes: the .pte, the run's input bytes, the reference output, the record."""

    pte: str
    run_inputs: str
    reference: str
    meta: str


def lower_cpu_cell(
    program: str, inputs: str, cpu: str, quant: str, files: CpuCellFiles, calibration: Calibration = Calibration()
) -> dict:
    """Lower one model for one CPU; write the .pte, the run input bytes, the reference and metadata."""
    scheme = quant  # the workflow's name (runtime.binding)
    if cpu not in CPU_TARGETS:
        raise StageError(f"unknown CPU target {cpu!r}; allowed: {', '.join(CPU_TARGETS)}")
    if scheme not in CPU_SCHEMES:
        raise StageError(f"the Cortex-M path quantizes to {', '.join(CPU_SCHEMES)} only, not {scheme}")
    exported = torch.export.load(program)
    example_inputs = load_tensors(inputs)
    dataset, seed = calibration.dataset, calibration.seed
    calibrated, calibrated_on = calibration_set(example_inputs, dataset, calibration.calibration_samples, seed)
    samples, labels, _ = evaluation_set(example_inputs, dataset, seed, 1, 1)
    sample = samples[0]
    sample_source = "the example inputs" if labels is None and dataset is None else f"held-out sample 0 ({dataset})"
    float_module = exported.module(check_guards=False)
    try:
        with running("ExecuTorch's Cortex-M lowering", f"quantizing and lowering for {cpu}"):
            edge, _ = lower_for_cortex_m(float_module, example_inputs, calibrated, cpu)
        lowered = edge.exported_program()
        expected = lowered.module()(*(channels_last(x) for x in sample))
        executorch_program = edge.to_executorch()
    except Exception as error:
        raise StageError(f"Cortex-M lowering ({cpu}, {scheme}) failed: {_with_cause(error)}") from error
    with torch.no_grad():
        float_outputs = float_module(*sample)
    expected = _as_tuple(expected)
    float_outputs = _as_tuple(float_outputs)

    atomic_write_bytes(files.pte, executorch_program.buffer)
    atomic_write_bytes(files.run_inputs, input_bytes(sample, _user_input_placeholders(lowered)))
    torch.save(
        {
            "expected": [t.contiguous() for t in expected],
            "float": [t.contiguous() for t in float_outputs],
            "scales": output_scales(lowered.graph_module),
            "label": None if labels is None else int(labels[0]),
        },
        files.reference,
    )
    record = {
        "cpu": cpu,
        "scheme": scheme,
        **_program_figures(executorch_program, lowered),
        "calibrated_on": calibrated_on,
        "run_input": sample_source,
        "input_shapes": [list(x.shape) for x in sample],
        "versions": tool_versions(),
    }
    write_json(files.meta, record)
    log.info(
        "%s for %s: %d-byte .pte, %d CMSIS-NN and %d portable operators",
        scheme,
        cpu,
        record["pte_bytes"],
        record["cmsis_nn_ops"],
        record["portable_ops"],
    )
    return record


def _program_figures(executorch_program, lowered) -> dict:
    """The .pte's size, its planned memory and its operators, by kernel library."""
    operators = operator_table(lowered.graph_module)
    plan = executorch_program.executorch_program.execution_plan[0]
    return {
        "pte_bytes": len(executorch_program.buffer),
        "planned_bytes": sum(plan.non_const_buffer_sizes),
        "operators": operators,
        "cmsis_nn_ops": sum(n for op, n in operators.items() if is_cmsis_nn_kernel(op)),
        "portable_ops": sum(n for op, n in operators.items() if not op.startswith("cortex_m::")),
    }


def _with_cause(error: BaseException) -> str:
    """The error and, when a pass manager wrapped it, the error underneath (where the reason is)."""
    text = f"{type(error).__name__}: {error}"
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    if root is not error:
        text += f"; cause: {type(root).__name__}: {str(root).splitlines()[0] if str(root) else ''}"
    return text


def _as_tuple(outputs) -> tuple:
    if isinstance(outputs, torch.Tensor):
        return (outputs,)
    return tuple(outputs)
