"""Where the NPU path and the quantized model part ways: layer by layer, in each layer's own steps.

The verify stage compares the model as the NPU computes it (each delegated partition on the
TOSA reference model) with the quantized model in PyTorch at the outputs. When they differ by
more than the allowed steps, this module finds where it starts:

1. Every intermediate tensor of the partition's *actual* TOSA (the bytes the cells compiled,
   not a re-lowering) is made a graph output (tosa_serializer: the flatbuffer's block gets
   each operator's output as an extra output), and the TOSA reference model runs it once on the
   delegate's inputs: the value of every tensor the NPU computes.
2. Each int8 activation of the quantized model (a `quantize_per_tensor` node's output: what
   the NPU holds between layers) is paired with the TOSA tensor that computes it, through the
   provenance the lower stage recorded for each TOSA tensor (ExecuTorch keeps the exported
   node names in `from_node`): the last TOSA tensor, in TOSA order, whose sources include the
   nodes between that quantize node and the previous ones (a convolution, the ReLU folded into
   its rescale, ...). TOSA holds 4-D activations as NHWC; they are compared in PyTorch's NCHW.
3. The quantized model runs twice more: plainly, and *teacher-forced*: each paired quantize
   node is computed from the TOSA values of the layers before it, then replaced by its own TOSA
   value for the layers after. Per layer this gives
   - the accumulated difference: TOSA against the plain quantized model, and
   - the layer's own difference: TOSA against the quantized model given the same inputs,
   both in integer steps of that layer's own quantization scale (int8 values differ by steps).

A layer whose own difference exceeds the allowed steps computes something else than the
quantized model: that is a lowering problem, and it is where it starts. If every layer is
within the allowed steps on its own but the output drifts further, the difference is rounding
accumulated over layers (ExecuTorch's own model tests allow for it with an absolute tolerance
on the output, e.g. atol=0.25 for MobileNetV2 in backends/arm/test/models/test_mobilenet_v2_arm.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class LayerError:
    layer: str  # the compute node that produces the activation (e.g. 'conv2d_1')
    ops: str  # what the layer computes ('conv2d + relu')
    module: str  # the nn.Module path, when the model has one ('layer1.0.conv2')
    partition: int
    own_steps: int  # given the same inputs as the NPU
    accumulated_steps: int  # from the model's input on

    def as_dict(self) -> dict:
        return {
            "layer": self.layer,
            "ops": self.ops,
            "module": self.module,
            "partition": self.partition,
            "own_steps": self.own_steps,
            "accumulated_steps": self.accumulated_steps,
        }


@dataclass
class Location:
    layers: list[LayerError] = field(default_factory=list)
    unmatched: int = 0  # activations of the quantized model no TOSA tensor was paired with
    problem: str | None = None  # why locating was not possible, if it was not

    def first_over(self, steps: float) -> LayerError | None:
        return next((layer for layer in self.layers if layer.own_steps > steps), None)

    def as_dict(self) -> dict:
        return {
            "layers": [layer.as_dict() for layer in self.layers],
            "unmatched": self.unmatched,
            "problem": self.problem,
        }


# ---- step 1: every intermediate of the actual TOSA --------------------------------------------


def with_intermediates_as_outputs(tosa: bytes) -> tuple[bytes, list[str]]:
    """The TOSA flatbuffer with every operator's output (constants aside) a graph output too,
    and the names of all outputs in order (the original outputs first)."""
    import tosa_serializer as ts

    # the serializer's path prefix is where it would write tensor data files: a folder of our own
    with tempfile.TemporaryDirectory(prefix="ethosweep-locate-") as tmp, quiet_c_output():
        path = os.path.join(tmp, "partition.tosa")
        with open(path, "wb") as f:
            f.write(tosa)
        graph = ts.TosaSerializer(tmp)
        if not graph.loadTosaFlatbuffer(path):
            raise RuntimeError("tosa_serializer could not read the partition's TOSA")
        block = graph.regions[0].basicBlocks[0]
        names = list(block.outputs)
        for operator in block.operators:
            if str(operator.op) in ("Op.CONST", "Op.CONST_SHAPE"):
                continue
            for name in operator.outputs:
                if name not in names:
                    block.addOutput(name)
                    names.append(name)
        return bytes(graph.serialize()), names


def run_all_tensors(tosa: bytes, inputs: list[torch.Tensor]) -> dict[str, np.ndarray]:
    """Every tensor the partition computes, by name, on the TOSA reference model."""
    import tosa_reference_model as reference

    expanded, names = with_intermediates_as_outputs(tosa)
    arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    with quiet_c_output():
        outputs, status = reference.run(expanded, arrays, verbosity="NONE", initialize_variable_tensor_from_numpy=True)
    if status != reference.GraphStatus.TOSA_VALID:
        raise RuntimeError(f"the TOSA reference model rejected the expanded partition: {status}")
    return dict(zip(names, outputs))


# ---- step 2: the quantized model's activations and their TOSA twins ------------------------------


def is_quantize(node) -> bool:
    return (
        node.op == "call_function"
        and "quantize_per_tensor" in str(node.target)
        and "dequantize" not in str(node.target)
    )


def is_dequantize(node) -> bool:
    return node.op == "call_function" and "dequantize_per" in str(node.target)


def layer_sources(q_node) -> list:
    """The compute nodes between a quantize node and the dequantize nodes before it: the layer."""
    layer, todo, seen = [], [q_node.args[0]], set()
    while todo:
        node = todo.pop()
        if not hasattr(node, "op") or node in seen:
            continue
        seen.add(node)
        if node.op != "call_function" or is_dequantize(node) or is_quantize(node):
            continue
        layer.append(node)
        todo.extend(node.all_input_nodes)
    return layer


def pair_activations(
    quant_graph,
    tensor_sources: list[dict[str, list[str]]],
    tosa_values: list[dict[str, np.ndarray]],
    plain: dict[str, torch.Tensor],
) -> dict[str, tuple[int, str]]:
    """quantize node name -> (partition, TOSA tensor name) for each activation the NPU computes."""
    pairs = {}
    for node in quant_graph.nodes:
        if not is_quantize(node) or node.name not in plain:
            continue
        names = {n.name for n in layer_sources(node)}
        if not names:  # the model's input, quantized on the CPU
            continue
        shape = tuple(plain[node.name].shape)
        for partition, sources in enumerate(tensor_sources):
            candidates = [
                t
                for t, chain in sources.items()
                if names & set(chain)
                and t in tosa_values[partition]
                and _same_dtype(tosa_values[partition][t], plain[node.name])
                and _nchw(tosa_values[partition][t], shape) is not None
            ]
            if candidates:
                pairs[node.name] = (partition, candidates[-1])  # the last: after rescale, reshape
    return pairs


def _same_dtype(array: np.ndarray, activation: torch.Tensor) -> bool:
    """Whether the TOSA tensor holds the activation's integer type: an int8 activation is the
    int8 output of the layer's final RESCALE, not an int32 accumulator before it (an ADD of two
    rescaled branches, a convolution's sum) that happens to have the same shape."""
    return array.dtype == torch.empty(0, dtype=activation.dtype).numpy().dtype


def _nchw(array: np.ndarray, shape: tuple) -> torch.Tensor | None:
    """The TOSA tensor in PyTorch's layout, if it is the activation of that shape: the same shape,
    NHWC for NCHW, or the same values with size-1 dimensions added (a linear layer run as a 1x1
    convolution holds its (N, C) output as (N, 1, 1, C))."""
    if tuple(array.shape) == shape:
        return torch.from_numpy(np.ascontiguousarray(array))
    if len(shape) == 4 and tuple(array.shape) == (shape[0], shape[2], shape[3], shape[1]):
        return torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))
    if [d for d in array.shape if d != 1] == [d for d in shape if d != 1]:
        return torch.from_numpy(np.ascontiguousarray(array.reshape(shape)))
    return None


# ---- step 3: plain and teacher-forced runs -------------------------------------------------------


class Recorder(torch.fx.Interpreter):
    """Runs the quantized model, recording each quantize node's output; with `forced`, each of
    those is computed (and recorded) and then replaced by the forced value for what follows."""

    def __init__(self, module, forced: dict[str, torch.Tensor] | None = None):
        super().__init__(module)
        self.forced = forced or {}
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n):
        result = super().run_node(n)
        if is_quantize(n) and isinstance(result, torch.Tensor):
            self.values[n.name] = result.detach().clone()
            if n.name in self.forced:
                return self.forced[n.name].to(result.dtype).reshape(result.shape)
        return result


def locate(
    quant_module,
    sample: tuple,
    partitions: list[tuple[bytes, list[torch.Tensor]]],
    tensor_sources: list[dict[str, list[str]]],
) -> Location:
    """Per-layer differences between the NPU path and the quantized model, for one sample.

    `partitions`: each delegated partition's TOSA and the inputs the NPU path gave it on this
    sample, in execution order; `tensor_sources`: the lower stage's provenance of each partition's
    TOSA tensors.
    """
    if len(tensor_sources) != len(partitions):
        return Location(
            problem=f"the lower stage recorded sources for {len(tensor_sources)} partitions, "
            f"the program has {len(partitions)}"
        )
    tosa_values = [run_all_tensors(tosa, inputs) for tosa, inputs in partitions]
    with torch.no_grad():
        plain = Recorder(quant_module)
        plain.run(*sample)
    pairs = pair_activations(quant_module.graph, tensor_sources, tosa_values, plain.values)
    if not pairs:
        return Location(problem="no activation of the quantized model could be paired with a TOSA tensor")
    npu = {name: _nchw(tosa_values[p][t], tuple(plain.values[name].shape)) for name, (p, t) in pairs.items()}
    with torch.no_grad():
        forced = Recorder(quant_module, forced=npu)
        forced.run(*sample)
    nodes = {n.name: n for n in quant_module.graph.nodes}
    order = {n: i for i, n in enumerate(quant_module.graph.nodes)}
    layers = []
    for name, (partition, _) in pairs.items():
        sources = sorted(layer_sources(nodes[name]), key=order.get)
        producer = sources[0] if sources else nodes[name]  # the layer's first op: conv2d of conv2d + relu
        layers.append(
            LayerError(
                layer=producer.name,
                ops=" + ".join(_op_name(n) for n in sources),
                module=_module_path(producer),
                partition=partition,
                own_steps=_steps(npu[name], forced.values[name]),
                accumulated_steps=_steps(npu[name], plain.values[name]),
            )
        )
    quantize_nodes = [n for n in quant_module.graph.nodes if is_quantize(n) and layer_sources(n)]
    return Location(layers=layers, unmatched=len(quantize_nodes) - len(pairs))


def _steps(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.to(torch.int32) - b.to(torch.int32)).abs().max()) if a.numel() else 0


def _op_name(node) -> str:
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    return name.split(".")[0].removeprefix("aten_")


def _module_path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


@contextlib.contextmanager
def quiet_c_output():
    """tosa-tools print notices to stdout from C++: keep them out of the job's log."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
