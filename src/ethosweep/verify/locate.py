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
   its rescale, ...). A TOSA tensor is brought to PyTorch's layout by the dimension order the
   lower stage recorded for it (ethosweep.compile.tosa_sources): from the graph's transposes,
   never guessed from its shape (NCHW and NHWC have the same shape when C == H == W).
3. The quantized model runs twice more: plainly, and *teacher-forced*: each paired quantize
   node is computed from the TOSA values of the layers before it, then replaced by its own TOSA
   value for the layers after. An operator the quantizer decomposed (layer_norm into mean, sub,
   mul, rsqrt, ...) is forced only at its inputs and judged at its last activation, as ExecuTorch's
   own tests judge it at its output: its internal roundings are the decomposition's own. Per layer
   this gives
   - the accumulated difference: TOSA against the plain quantized model, and
   - the layer's own difference: TOSA against the quantized model given the same inputs,
   both in integer steps of that layer's own quantization scale (int8 values differ by steps).

Each layer says what it is (`kind`: the operator of the model it comes from, `layer_norm` for
every operator its decomposition adds) and how wide its activation is (`bits`), so that its
difference is judged in its own steps by what ExecuTorch's own tests accept for that kind of
operator (ethosweep.verify.verdicts). The activations no TOSA tensor could be paired with are
listed too (`unpaired`), so a verdict can say what it could not see.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable

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
    kind: str = ""  # the model's operator it comes from ('conv2d', 'layer_norm' for its decomposition)
    bits: int = 8  # the activation's width: steps are of its own scale
    order: int = 0  # its place in the quantized graph
    composite: str = ""  # the model operator it was decomposed from (the same for all its activations)
    # inside a decomposed operator (not its last activation): judged as part of that operator's
    # output, as ExecuTorch's tests judge layer_norm by its output, not by its 9 operators
    internal: bool = False
    # activations before it that could not be paired: its inputs are then not the NPU's own
    unpaired_inputs: list[str] = field(default_factory=list)
    # another TOSA tensor was about as close to the activation as the one paired (locate.closest)
    uncertain: bool = False

    def as_dict(self) -> dict:
        return {
            "layer": self.layer,
            "ops": self.ops,
            "module": self.module,
            "partition": self.partition,
            "own_steps": self.own_steps,
            "accumulated_steps": self.accumulated_steps,
            "kind": self.kind,
            "bits": self.bits,
            "order": self.order,
            "composite": self.composite,
            "internal": self.internal,
            "unpaired_inputs": self.unpaired_inputs,
            "uncertain": self.uncertain,
        }


@dataclass
class Location:
    layers: list[LayerError] = field(default_factory=list)
    # activations the NPU computes that no TOSA tensor was paired with: {layer, ops, module, kind, order}
    unpaired: list[dict] = field(default_factory=list)
    # activations no partition computes (no TOSA tensor descends from them): operators left on the
    # CPU, which PyTorch runs on both paths, and operators the lowering removed (dropout)
    off_npu: list[dict] = field(default_factory=list)
    problem: str | None = None  # why locating was not possible, if it was not

    def as_dict(self) -> dict:
        return {
            "layers": [layer.as_dict() for layer in self.layers],
            "unpaired": self.unpaired,
            "off_npu": self.off_npu,
            "paired": len(self.layers),
            "activations": len(self.layers) + len(self.unpaired),
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
    tensor_sources: list[dict[str, dict]],
    tosa_values: list[dict[str, np.ndarray]],
    plain: dict[str, torch.Tensor],
    uncertain: set[str] | None = None,
) -> dict[str, tuple[int, str]]:
    """quantize node name -> (partition, TOSA tensor name) for each activation the NPU computes.
    `uncertain` collects the activations whose runner-up candidate is about as close as the pick."""
    pairs = {}
    uncertain = set() if uncertain is None else uncertain
    for node in quant_graph.nodes:
        if not is_quantize(node) or node.name not in plain:
            continue
        sources = layer_sources(node)
        if not sources:  # the model's input, quantized on the CPU
            continue
        if is_exact(_layer_ops(node)):
            # a reshape or transpose moves its input's values, and is recomputed from them: paired,
            # its TOSA tensor (often flattened from a transposed one) could only be misread
            continue
        names = {n.name for n in sources}
        shape = tuple(plain[node.name].shape)
        # over every partition: node names can recur in another partition's provenance (a bias
        # add, a residual add), and the tensor that holds this activation is the closest to it
        candidates = [
            (partition, t)
            for partition, tensors in enumerate(tensor_sources)
            for t, recorded in tensors.items()
            if names & set(recorded["sources"])
            and t in tosa_values[partition]
            and _same_dtype(tosa_values[partition][t], plain[node.name])
            and in_pytorch_layout(tosa_values[partition][t], shape, recorded.get("order"), plain[node.name]) is not None
        ]
        if candidates:
            pairs[node.name] = closest(candidates, tensor_sources, tosa_values, plain[node.name], uncertain, node.name)
    pair_downstream(quant_graph, tensor_sources, tosa_values, plain, pairs, uncertain=uncertain)
    return pairs


def pair_downstream(
    quant_graph, tensor_sources, tosa_values, plain, pairs: dict, hops: int = 3, uncertain: set | None = None
) -> None:
    """Pair, in place, the activations no provenance names, through the TOSA graph's data flow.

    ExecuTorch's passes add some operators without provenance: the TABLE of a GELU, an rsqrt or an
    exp (and the RESCALE after it) names only itself. Such an activation has one activation as its
    input; if that one is paired with a TOSA tensor, the activation is the first tensor downstream
    of it (within a few operators) with the activation's type and shape that no other activation
    was paired with."""
    taken = {(p, t) for p, t in pairs.values()}
    for node in quant_graph.nodes:
        if not is_quantize(node) or node.name in pairs or node.name not in plain or not layer_sources(node):
            continue
        if is_exact(_layer_ops(node)):
            continue  # recomputed from its input (pair_activations)
        inputs, moved = activation_inputs(node), 0
        while len(inputs) == 1 and inputs[0].name not in pairs and is_exact(_layer_ops(inputs[0])):
            inputs, moved = activation_inputs(inputs[0]), moved + 1  # through a reshape to what it moves
        if len(inputs) != 1 or inputs[0].name not in pairs:
            continue
        partition, start = pairs[inputs[0].name]
        tensors = tensor_sources[partition]
        consumers: dict[str, list[str]] = {}
        for name, recorded in tensors.items():
            for source in recorded.get("inputs", []):
                consumers.setdefault(source, []).append(name)
        frontier, shape = [start], tuple(plain[node.name].shape)
        for _ in range(hops + moved):
            frontier = [c for t in frontier for c in consumers.get(t, [])]
            found = [
                t
                for t in frontier
                if (partition, t) not in taken
                and t in tosa_values[partition]
                and _same_dtype(tosa_values[partition][t], plain[node.name])
                and in_pytorch_layout(tosa_values[partition][t], shape, tensors[t].get("order"), plain[node.name])
                is not None
            ]
            if found:
                found = [(partition, t) for t in found]
                pairs[node.name] = closest(found, tensor_sources, tosa_values, plain[node.name], uncertain, node.name)
                taken.add(pairs[node.name])
                break


def activation_inputs(quantize_node) -> list:
    """The activations (quantize nodes) a layer reads: the nearest ones upstream of its operators."""
    found, seen = [], set()
    todo = [i for s in layer_sources(quantize_node) for i in s.all_input_nodes]
    while todo:
        current = todo.pop()
        if current in seen or not hasattr(current, "op"):
            continue
        seen.add(current)
        if is_quantize(current):
            found.append(current)
            continue
        todo.extend(current.all_input_nodes)
    return found


# A pick whose runner-up (another tensor, with other values) is within this many steps of the
# quantized model's activation is not certain: either could be the activation, and a small error
# in it could hide behind the other. One step: the tolerance of an int8 layer.
UNCERTAIN_MARGIN = 1


def closest(
    candidates: list[tuple[int, str]],
    tensor_sources: list,
    tosa_values: list,
    activation,
    uncertain: set | None = None,
    name: str = "",
) -> tuple[int, str]:
    """Of the TOSA tensors that descend from a layer with its type and shape (a layer's output, the
    rescale that follows, a consumer's input rescale to another scale, a namesake in another
    partition), the one whose values are closest to the quantized model's activation: the
    activation itself. A wrong layer is still found: every candidate is then far off, and the
    closest is compared. `name` goes into `uncertain` when a differing runner-up is about as close."""
    reference = activation.to(torch.int64)
    values = {}

    def distance(candidate: tuple[int, str]) -> int:
        p, tensor = candidate
        value = in_pytorch_layout(
            tosa_values[p][tensor], tuple(activation.shape), tensor_sources[p][tensor].get("order"), activation
        )
        values[candidate] = value
        return int((value.to(torch.int64) - reference).abs().max()) if value is not None and value.numel() else 0

    ranked = sorted(reversed(candidates), key=distance)  # stable: on a tie, the last (after rescale, reshape)
    pick = ranked[0]
    if uncertain is not None and len(ranked) > 1:
        runner_up = ranked[1]
        differs = values[runner_up] is not None and not torch.equal(values[runner_up], values[pick])
        if differs and distance(runner_up) - distance(pick) <= UNCERTAIN_MARGIN and distance(runner_up) > 0:
            uncertain.add(name)
    return pick


def _same_dtype(array: np.ndarray, activation: torch.Tensor) -> bool:
    """Whether the TOSA tensor holds the activation's integer type: an int8 activation is the
    int8 output of the layer's final RESCALE, not an int32 accumulator before it (an ADD of two
    rescaled branches, a convolution's sum) that happens to have the same shape."""
    return array.dtype == torch.empty(0, dtype=activation.dtype).numpy().dtype


def in_pytorch_layout(
    array: np.ndarray, shape: tuple, order: list[int] | None, reference: torch.Tensor | None = None
) -> torch.Tensor | None:
    """The TOSA tensor in PyTorch's layout, if it is the activation of that shape: undone by the
    dimension order the lowering recorded (TOSA tensor = PyTorch tensor.permute(order)), or the
    same values with size-1 dimensions added (a linear layer run as a 1x1 convolution holds its
    (N, C) output as (N, 1, 1, C)). Where the lowering scrambled the layout (a reshape of a
    transposed tensor: the order is None), the shape cannot decide (it is ambiguous whenever two
    dimensions are equal): each reading of the array as the activation's shape is tried, and the
    one closest to the quantized model's own value (`reference`) is taken; without a reference,
    only an unambiguous reading."""
    if order is not None:
        if len(order) != array.ndim:
            return None
        logical = array.transpose([order.index(i) for i in range(len(order))])
        if tuple(logical.shape) == shape:
            return torch.from_numpy(np.ascontiguousarray(logical))
        if [d for d in logical.shape if d != 1] == [d for d in shape if d != 1]:
            return torch.from_numpy(np.ascontiguousarray(logical.reshape(shape)))
        return None
    readings = [
        array.transpose(p)
        for p in itertools.permutations(range(array.ndim))
        if tuple(array.shape[i] for i in p) == shape
    ]
    if not readings and [d for d in array.shape if d != 1] == [d for d in shape if d != 1]:
        readings = [array.reshape(shape)]
    if not readings:
        return None
    if len(readings) > 1:
        if reference is None:
            return None
        target = reference.to(torch.int64).numpy()
        readings.sort(key=lambda r: int(np.abs(r.astype(np.int64) - target).max()))
    return torch.from_numpy(np.ascontiguousarray(readings[0]))


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
    tensor_sources: list[dict[str, dict]],
    cpu_ops: frozenset[str] = frozenset(),
) -> Location:
    """Per-layer differences between the NPU path and the quantized model, for one sample.

    `partitions`: each delegated partition's TOSA and the inputs the NPU path gave it on this
    sample, in execution order; `tensor_sources`: the lower stage's provenance of each partition's
    TOSA tensors; `cpu_ops`: the operators the lowered program runs on the CPU (by name).

    Every activation of the quantized model ends up in one place: paired with a TOSA tensor (a
    layer), or accounted for without one (it only moves values, or it is inside an operator that is
    judged at its paired output), or run on the CPU (PyTorch runs it on both paths), or unpaired.
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
    uncertain: set[str] = set()
    pairs = pair_activations(quant_module.graph, tensor_sources, tosa_values, plain.values, uncertain)
    if not pairs:
        return Location(problem="no activation of the quantized model could be paired with a TOSA tensor")
    npu = {
        name: in_pytorch_layout(
            tosa_values[p][t], tuple(plain.values[name].shape), tensor_sources[p][t].get("order"), plain.values[name]
        )
        for name, (p, t) in pairs.items()
    }
    order = {n: i for i, n in enumerate(quant_module.graph.nodes)}
    activations = [n for n in quant_module.graph.nodes if is_quantize(n) and layer_sources(n)]
    internal = internal_activations(activations, order)
    described = {node.name: describe(node, order) for node in activations}
    unpaired, off_npu = [], []
    seen = Unseen(
        activations=activations,
        described=described,
        internal=internal,
        # an operator judged at its paired output accounts for its internal activations
        judged={described[n]["composite"] for n in pairs if n not in internal},
        tensor_sources=tensor_sources,
        tosa_values=tosa_values,
        pairs=pairs,
        plain=plain.values,
    )
    for node in activations:
        if node.name in pairs or accounted_for(node, seen):
            continue
        layer = described[node.name]
        if all(op.strip() in cpu_ops for op in layer["ops"].split("+")):
            off_npu.append(layer)
        else:
            unpaired.append(layer)
    hidden = {n.name for n in activations if described[n.name] in unpaired}
    boundaries = {name: value for name, value in npu.items() if name not in internal}
    with torch.no_grad():
        forced = Recorder(quant_module, forced=boundaries)
        forced.run(*sample)
    layers = [
        LayerError(
            **described[node.name],
            partition=pairs[node.name][0],
            own_steps=_steps(npu[node.name], forced.values[node.name]),
            accumulated_steps=_steps(npu[node.name], plain.values[node.name]),
            bits=activation_bits(node),
            internal=node.name in internal,
            unpaired_inputs=unpaired_before(node, set(boundaries), hidden, described),
            uncertain=node.name in uncertain,
        )
        for node in activations
        if node.name in pairs
    ]
    return Location(layers=layers, unpaired=unpaired, off_npu=off_npu)


# ---- activations no TOSA tensor is paired with, yet accounted for --------------------------------


@dataclass(frozen=True)
class Unseen:
    """What deciding whether an unpaired activation is accounted for needs to know."""

    activations: list
    described: dict
    internal: set
    judged: set  # the decomposed operators judged at their paired output
    tensor_sources: list
    tosa_values: list
    pairs: dict
    plain: dict  # the plain quantized model's values, by node name


@dataclass(frozen=True)
class AccountedFor:
    """A way the lowering leaves an activation without a TOSA tensor of its own, while the paired
    layers still judge what the NPU computes: what the lowering does, why the paired reader
    accounts for it, and the test that shows it on a real model."""

    name: str
    lowering: str
    why: str
    test: str
    applies: Callable[[object, Unseen], bool]


ACCOUNTED_FOR = (
    AccountedFor(
        "moves values",
        "reshapes, transposes, slices, dropout: no arithmetic; a transposed tensor is often flattened",
        "recomputed from its paired inputs it cannot differ, and its flattened TOSA tensor could only be misread",
        "tests/test_verify.py::test_a_transformer_is_paired_without_its_reshapes_and_its_fused_sums_are_accounted_for",
        lambda node, seen: is_exact(seen.described[node.name]["ops"]),
    ),
    AccountedFor(
        "inside a decomposition",
        "the quantizer decomposes layer_norm, softmax, ... into operators of their own",
        "the operator is judged at its paired output, as ExecuTorch's tests judge it: its roundings are its own",
        "tests/test_verify.py::test_a_decomposed_layer_norm_is_judged_at_its_output_by_executorchs_tolerance",
        lambda node, seen: node.name in seen.internal and seen.described[node.name]["composite"] in seen.judged,
    ),
    AccountedFor(
        "folded into its readers",
        "an accumulator rescaled straight into the next operator (a decomposed mean's int32 sum, an int16 "
        "residual convolution's INT48 result)",
        "every activation reading it is paired and judged from the NPU's inputs before it, so its rounding is theirs",
        "tests/test_verify.py::test_int16_convolutions_folded_into_their_residual_add_are_accounted_for",
        lambda node, seen: fused_into_paired_consumers(
            node, seen.activations, seen.tensor_sources, seen.tosa_values, seen.pairs, seen.plain[node.name].numel()
        ),
    ),
)


def accounted_for(node, seen: Unseen) -> AccountedFor | None:
    """The first entry of ACCOUNTED_FOR that accounts for this unpaired activation, if any."""
    return next((entry for entry in ACCOUNTED_FOR if entry.applies(node, seen)), None)


def fused_into_paired_consumers(
    node, activations: list, tensor_sources: list, tosa_values: list, pairs: dict, size: int
) -> bool:
    """Whether the lowering folded this activation into the operators that read it: its operator is
    in the TOSA (a tensor names it), but only as an accumulator whose RESCALE computes the next
    operator's input or output (a decomposed mean's sum, rescaled by the divisor at once; an int16
    residual convolution's INT48 result, rescaled straight into the add), and every
    activation reading it is paired. Those consumers are judged from the NPU's inputs before it,
    so its rounding is charged to them: accounted for, not unseen."""
    names = {n.name for n in layer_sources(node)}
    named = [
        tosa_values[p][t]
        for p, tensors in enumerate(tensor_sources)
        for t, recorded in tensors.items()
        if names & set(recorded["sources"]) and t in tosa_values[p]
    ]
    # an accumulator: int32, or an int16 convolution's INT48, which the reference model cannot
    # return (it leaves an empty array); a tensor of another size is not it (the SLICE a strided
    # convolution's lowering makes of its input carries the convolution's name)
    if not named or any(value.dtype != np.int32 and value.size == size for value in named):
        return False  # not in the TOSA, or there in its own type: it should have been paired
    consumers = [a for a in activations if node in activation_inputs(a)]
    return bool(consumers) and all(c.name in pairs for c in consumers)


def describe(node, order: dict) -> dict:
    """What the report says about an activation: its layer, operators, module, kind, place, operator."""
    sources = sorted(layer_sources(node), key=order.get)
    producer = sources[0]  # the layer's first op: conv2d of conv2d + relu
    return {
        "layer": producer.name,
        "ops": " + ".join(_op_name(n) for n in sources),
        "module": _module_path(producer),
        "kind": operator_kind(sources),
        "order": order[node],
        "composite": composite_root(sources),
    }


# Operators that only move values (no arithmetic, no rounding): an activation they make is the NPU's
# input activation moved. It is never paired (recomputed from its input, it cannot differ, and its
# TOSA tensor, often a flattened transposed one, could only be misread), and hides nothing.
# (Not cat: its inputs may be requantized to a common scale.)
EXACT_OPS = frozenset(
    {"reshape", "view", "_unsafe_view", "flatten", "unflatten", "permute", "transpose", "squeeze", "unsqueeze"}
    | {"expand", "t", "dropout", "clone", "alias", "detach", "contiguous", "_to_copy", "to"}
    | {"unbind", "getitem", "select", "slice", "narrow", "split", "split_with_sizes", "chunk"}
)


def _layer_ops(quantize_node) -> str:
    return " + ".join(_op_name(n) for n in layer_sources(quantize_node))


def is_exact(ops: str) -> bool:
    return all(op.strip() in EXACT_OPS for op in ops.split("+"))


def composite_root(sources: list) -> str:
    """The name of the model operator a layer was decomposed from (its outermost `from_node`), the
    same for every operator of one decomposition; the layer's own first node if it has none."""
    for node in sources:
        source, root = node.meta.get("from_node"), None
        while source:
            current = source[-1] if isinstance(source, list) else source
            root = current
            source = getattr(current, "from_node", None)
        if getattr(root, "name", None):
            return root.name
    return sources[0].name


def internal_activations(activations: list, order: dict) -> set[str]:
    """The activations inside a decomposed operator: every one of its activations but the last."""
    groups: dict[str, list] = {}
    for node in activations:
        groups.setdefault(composite_root(sorted(layer_sources(node), key=order.get)), []).append(node)
    return {n.name for nodes in groups.values() for n in sorted(nodes, key=order.get)[:-1]}


def unpaired_before(node, boundaries: set[str], hidden: set[str], described: dict) -> list[str]:
    """The unpaired activations (`hidden`) between this one and the NPU values it is given (the
    forced boundaries), outside its own operator: the quantized model computes them itself, so
    this layer's inputs are not the NPU's, and an error in them shows up here."""
    found, seen = [], set()
    own = described[node.name]["composite"]
    todo = [i for s in layer_sources(node) for i in s.all_input_nodes]
    while todo:
        current = todo.pop()
        if current in seen or not hasattr(current, "op"):
            continue
        seen.add(current)
        if is_quantize(current) and current.name in boundaries:
            continue
        if current.name in hidden and described[current.name]["composite"] != own:
            found.append(described[current.name]["layer"])
        todo.extend(current.all_input_nodes)
    return sorted(set(found))


def activation_bits(quantize_node) -> int:
    """16 for an int16 activation (a16w8), else 8."""
    return 16 if torch.int16 in (quantize_node.args[-1], quantize_node.kwargs.get("dtype")) else 8


def operator_kind(sources: list) -> str:
    """The model's operator a layer comes from: the outermost operator its nodes were decomposed from
    (ExecuTorch's quantizer decomposes layer_norm, softmax, gelu into several quantized operators,
    and keeps where each came from in `from_node`), else the layer's own first operator."""
    for node in sources:
        source, root = node.meta.get("from_node"), None
        while source:
            current = source[-1] if isinstance(source, list) else source
            root = current
            source = getattr(current, "from_node", None)
        name = _target_name(str(getattr(root, "target", "") or ""))
        if name and not name.startswith(("quantize", "dequantize")):
            return name
    return _op_name(sources[0]) if sources else ""


def _target_name(target: str) -> str:
    """'aten.layer_norm.default' or 'aten::layer_norm' -> 'layer_norm'; '' for none."""
    parts = [p for p in target.replace("::", ".").split(".") if p]
    if parts and parts[0] in ("aten", "torch", "ops", "quantized_decomposed", "edge", "exir_ops"):
        parts = parts[1:]
    name = parts[0] if parts else ""
    return "" if name == "None" else name.removeprefix("aten_")


def _steps(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.to(torch.int32) - b.to(torch.int32)).abs().max()) if a.numel() else 0


def _op_name(node) -> str:
    return operator_name(node.target)


def operator_name(target) -> str:
    """An operator's short name: aten.conv2d.default, an edge dialect's aten.avg_pool2d.default,
    aten_convolution_default -> conv2d, avg_pool2d, convolution_default."""
    return _target_name(getattr(target, "__name__", None) or str(target))


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
