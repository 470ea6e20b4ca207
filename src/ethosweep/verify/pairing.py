"""Step 2 of locating a numerical difference (ethosweep.verify.locate): each activation of the
quantized model paired with the TOSA tensor that computes it, in PyTorch's layout.

A pair is found through the provenance the lower stage recorded for each TOSA tensor (ExecuTorch
keeps the exported node names in `from_node`): the last TOSA tensor, in TOSA order, whose sources
include the layer's nodes. Where provenance is ambiguous the closest value decides, and only with
a margin. A TOSA tensor is brought to PyTorch's layout by the dimension order the lower stage
recorded for it (ethosweep.compile.tosa_sources), never guessed from its shape.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from ethosweep.verify.layers import activation_inputs, is_exact, is_quantize, layer_ops, layer_sources


def pair_activations(
    quant_graph,
    tensor_sources: list[dict[str, dict]],
    tosa_values: list[dict[str, np.ndarray]],
    plain: dict[str, torch.Tensor],
    uncertain: set[str] | None = None,
) -> dict[str, tuple[int, str]]:
    """quantize node name -> (partition, TOSA tensor name) for each activation the NPU computes.
    `uncertain` collects the activations whose runner-up candidate is about as close as the pick."""
    pairs, no_result = {}, set()
    uncertain = set() if uncertain is None else uncertain
    for node in quant_graph.nodes:
        if not is_quantize(node) or node.name not in plain:
            continue
        sources = layer_sources(node)
        if not sources:  # the model's input, quantized on the CPU
            continue
        if is_exact(layer_ops(node)):
            # a reshape or transpose moves its input's values, and is recomputed from them: paired,
            # its TOSA tensor (often flattened from a transposed one) could only be misread
            continue
        names = {n.name for n in sources}
        shape = tuple(plain[node.name].shape)
        # over every partition: node names can recur in another partition's provenance (a bias
        # add, a residual add), and the tensor that holds this activation is the closest to it
        named = [
            (partition, t)
            for partition, tensors in enumerate(tensor_sources)
            for t, recorded in tensors.items()
            if names & set(recorded["sources"])
            and t in tosa_values[partition]
            and _same_dtype(tosa_values[partition][t], plain[node.name])
        ]
        candidates = [
            (partition, t)
            for partition, t in named
            if in_pytorch_layout(
                tosa_values[partition][t], shape, tensor_sources[partition][t].get("order"), plain[node.name]
            )
            is not None
        ]
        if named and not candidates:
            # its result is there, in a layout no reading recovers (a ReLU ExecuTorch moved after the
            # permute and flatten that follow it): a tensor downstream of its input would be another's
            no_result.add(node.name)
            continue
        own = [c for c in candidates if not moves_its_input(c, tensor_sources, names)]
        if own:
            pairs[node.name] = closest(own, tensor_sources, tosa_values, plain[node.name], uncertain, node.name)
        elif candidates:
            # only the layout of the layer's input is there: its result was folded into its consumer
            # (an int16 convolution's output rescale merged with the next add's input rescale)
            no_result.add(node.name)
    pair_downstream(quant_graph, tensor_sources, tosa_values, plain, pairs, uncertain=uncertain, skip=no_result)
    return pairs


# TOSA operators that only move values (by ExecuTorch's tensor names, 'tosa_transpose_default_1')
_MOVES = ("tosa_transpose", "tosa_reshape", "tosa_slice")


def moves_its_input(candidate: tuple[int, str], tensor_sources: list, names: set[str]) -> bool:
    """Whether a TOSA tensor named after a layer only lays out that layer's input: a transpose (or
    reshape, slice) that ExecuTorch inserts before the layer carries its provenance, with its input
    from outside the layer. Its values are the input's, not the layer's result."""
    partition, tensor = candidate
    tensors = tensor_sources[partition]
    if not tensor.startswith(_MOVES):
        return False
    inputs = tensors[tensor].get("inputs", [])
    return bool(inputs) and not any(names & set(tensors.get(i, {}).get("sources", [])) for i in inputs)


def pair_downstream(
    quant_graph,
    tensor_sources,
    tosa_values,
    plain,
    pairs: dict,
    hops: int = 3,
    uncertain: set | None = None,
    skip: set = frozenset(),
) -> None:
    """Pair, in place, the activations no provenance names, through the TOSA graph's data flow.

    ExecuTorch's passes add some operators without provenance: the TABLE of a GELU, an rsqrt or an
    exp (and the RESCALE after it) names only itself. Such an activation has one activation as its
    input; if that one is paired with a TOSA tensor, the activation is the first tensor downstream
    of it (within a few operators) with the activation's type and shape that no other activation
    was paired with, and that does not only move values: a SLICE of the input (an LSTM's gates,
    cut from one sum) has the activation's type and shape and is not its result."""
    taken = {(p, t) for p, t in pairs.values()}
    for node in quant_graph.nodes:
        if not is_quantize(node) or node.name in pairs or node.name in skip or node.name not in plain:
            continue
        if not layer_sources(node):
            continue
        if is_exact(layer_ops(node)):
            continue  # recomputed from its input (pair_activations)
        inputs, moved = activation_inputs(node), 0
        while len(inputs) == 1 and inputs[0].name not in pairs and is_exact(layer_ops(inputs[0])):
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
                and not t.startswith(_MOVES)
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
