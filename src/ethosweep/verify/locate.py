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

from dataclasses import dataclass, field

import numpy as np
import torch

from ethosweep.compile.tosa_graph import loaded, quiet_c_output
from ethosweep.runtime.errors import StageError
from ethosweep.verify.accounted import Unseen, accounted_for, unpaired_before
from ethosweep.verify.layers import (
    activation_bits,
    describe,
    internal_activations,
    is_dequantize,
    is_quantize,
    layer_sources,
    upstream,
)
from ethosweep.verify.pairing import in_pytorch_layout, pair_activations


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
    # activations before it that the quantized model clamps to their integer range on this input,
    # and its own steps when the quantized model hands them on whole (where the NPU adds the sum
    # on in int32 without materialising them, as ExecuTorch lowers a16w8 residual adds)
    saturated_inputs: list[str] = field(default_factory=list)
    unsaturated_steps: int | None = None

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
            "saturated_inputs": self.saturated_inputs,
            "unsaturated_steps": self.unsaturated_steps,
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
    with loaded(tosa) as (graph, block):
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
        raise StageError(f"the TOSA reference model rejected the expanded partition: {status}")
    return dict(zip(names, outputs))


# ---- step 3: plain and teacher-forced runs -------------------------------------------------------


class Recorder(torch.fx.Interpreter):
    """Runs the quantized model, recording each quantize node's output and whether it clamped a
    value to its integer range (`saturated`); with `forced`, each of those is computed (and
    recorded) and then replaced by the forced value for what follows; with `whole`, those hand on
    the value they quantize as it is, neither rounded nor clamped (and record it quantized)."""

    def __init__(self, module, forced: dict[str, torch.Tensor] | None = None, whole: frozenset[str] = frozenset()):
        super().__init__(module)
        self.forced = forced or {}
        self.whole = whole
        self.values: dict[str, torch.Tensor] = {}
        self.saturated: set[str] = set()

    def run_node(self, n):
        if is_dequantize(n) and getattr(n.args[0], "name", None) in self.whole:
            return self.env[n.args[0]]  # the value its quantize node handed on whole
        result = super().run_node(n)
        if not (is_quantize(n) and isinstance(result, torch.Tensor)):
            return result
        self.values[n.name] = result.detach().clone()
        x, scale, zero_point = self.fetch_args_kwargs_from_env(n)[0][:3]
        if torch.any(torch.round(x * (1.0 / float(scale))) + int(zero_point) != result.to(torch.float32)):
            self.saturated.add(n.name)  # the clamp changed it (the rounding as ExecuTorch's decomposition has it)
        if n.name in self.whole:
            return x
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
    unpaired, off_npu = _unpaired_and_off_npu(seen, cpu_ops)
    hidden = {n.name for n in activations if described[n.name] in unpaired}
    boundaries = {name: value for name, value in npu.items() if name not in internal}
    layers = _layer_errors(seen, npu, _forced_runs(quant_module, sample, seen, boundaries), hidden, uncertain)
    return Location(layers=layers, unpaired=unpaired, off_npu=off_npu)


@dataclass
class ForcedRuns:
    """The teacher-forced run, and what a clamp the NPU does not apply changes in it (`_bypassed`)."""

    boundaries: set[str]  # the activations forced to the NPU's values
    values: dict  # the forced run's, by quantize node
    saturated: set[str]  # the activations the quantized model clamped on this input
    bypassed: dict  # by layer after one the NPU does not clamp: what the NPU does not round or clamp before it
    whole: Recorder | None  # the forced run again with those handed on as computed, neither rounded nor clamped


def _forced_runs(quant_module, sample: tuple, seen: Unseen, boundaries: dict) -> ForcedRuns:
    with torch.no_grad():
        forced = Recorder(quant_module, forced=boundaries)
        forced.run(*sample)
        bypassed = _bypassed(seen, forced.saturated, set(boundaries))
        whole = _without_clamps(quant_module, sample, boundaries, bypassed)
    return ForcedRuns(set(boundaries), forced.values, forced.saturated, bypassed, whole)


def _bypassed(seen: Unseen, saturated: set[str], boundaries: set[str]) -> dict[str, list[str]]:
    """For each paired layer after an activation the quantized model clamped on this input and the NPU
    does not, the activations before it that the NPU does not hold as the quantized model does: those
    without a TOSA tensor of their own (a convolution's INT48 accumulator rescaled straight into an
    a16w8 add), and those whose tensor the layer's TOSA does not read (an a16w8 add's int32 sum carried
    on into the next add). The NPU neither rounds nor clamps them. Internal activations aside."""
    if not saturated:
        return {}
    paired_tensors = {(p, t) for p, t in seen.pairs.values()}
    found = {}
    for node in seen.activations:
        if node.name not in seen.pairs:
            continue
        own = seen.described[node.name]["composite"]
        before = [
            n.name
            for n in upstream(node, lambda n: is_quantize(n) and n.name in boundaries)
            # an activation of the model (not its input's quantization, the same on both paths)
            if n.name in seen.described and n.name not in seen.internal and seen.described[n.name]["composite"] != own
        ]
        if not saturated.intersection(before):
            continue
        read = _tensors_read(seen, seen.pairs[node.name], paired_tensors)
        bypassed = sorted(n for n in before if n not in boundaries or seen.pairs[n] not in read)
        if saturated.intersection(bypassed):
            found[node.name] = bypassed
    return found


def _tensors_read(seen: Unseen, tensor: tuple[int, str], paired_tensors: set) -> set[tuple[int, str]]:
    """The paired TOSA tensors a tensor is computed from, nearest on each path (not looked past)."""
    partition, name = tensor
    sources = seen.tensor_sources[partition]
    todo, done, read = list(sources.get(name, {}).get("inputs", [])), set(), set()
    while todo:
        current = todo.pop()
        if current in done:
            continue
        done.add(current)
        if (partition, current) in paired_tensors:
            read.add((partition, current))
        else:
            todo.extend(sources.get(current, {}).get("inputs", []))
    return read


def _without_clamps(quant_module, sample: tuple, boundaries: dict, bypassed: dict) -> Recorder | None:
    """The teacher-forced run again, with the activations the NPU does not clamp (`_bypassed`) handed on
    whole and not forced: what a layer computes from the sum the NPU keeps. One run for every layer: a
    layer reading, rounded, what another's NPU path keeps whole sees it whole too (half a step of that
    input's scale at most, against the thousands of steps a clamp makes)."""
    if not bypassed:
        return None
    handed_on = frozenset(name for names in bypassed.values() for name in names)
    kept = {name: value for name, value in boundaries.items() if name not in handed_on}
    whole = Recorder(quant_module, forced=kept, whole=handed_on)
    whole.run(*sample)
    return whole


def _saturated_before(node, seen: Unseen, npu: dict, runs: ForcedRuns) -> dict:
    """The activations before this layer that the quantized model clamped and the NPU does not, and how
    far off the layer is with what the NPU does not round or clamp handed on whole (see LayerError)."""
    if runs.whole is None or node.name not in runs.bypassed:
        return {}
    clamped = [name for name in runs.bypassed[node.name] if name in runs.saturated]
    return {
        "saturated_inputs": sorted({seen.described[name]["layer"] for name in clamped}),
        "unsaturated_steps": _steps(npu[node.name], runs.whole.values[node.name]),
    }


def _layer_errors(seen: Unseen, npu: dict, runs: ForcedRuns, hidden: set[str], uncertain: set[str]) -> list[LayerError]:
    """Each paired activation's error: its own (the quantized model forced to the NPU's values at
    every boundary before it) and the one accumulated from the model's input."""
    return [
        LayerError(
            **seen.described[node.name],
            partition=seen.pairs[node.name][0],
            own_steps=(own := _steps(npu[node.name], runs.values[node.name])),
            accumulated_steps=_steps(npu[node.name], seen.plain[node.name]),
            bits=activation_bits(node),
            internal=node.name in seen.internal,
            unpaired_inputs=unpaired_before(node, runs.boundaries, hidden, seen.described),
            uncertain=node.name in uncertain,
            **(_saturated_before(node, seen, npu, runs) if own else {}),
        )
        for node in seen.activations
        if node.name in seen.pairs
    ]


def _unpaired_and_off_npu(seen: Unseen, cpu_ops: frozenset[str]) -> tuple[list[dict], list[dict]]:
    """The activations neither paired nor accounted for: those whose operators all run on the CPU
    (PyTorch runs them on both paths), and the rest, unpaired."""
    unpaired, off_npu = [], []
    for node in seen.activations:
        if node.name in seen.pairs or accounted_for(node, seen):
            continue
        layer = seen.described[node.name]
        (off_npu if all(op.strip() in cpu_ops for op in layer["ops"].split("+")) else unpaired).append(layer)
    return unpaired, off_npu


def _steps(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.to(torch.int32) - b.to(torch.int32)).abs().max()) if a.numel() else 0
