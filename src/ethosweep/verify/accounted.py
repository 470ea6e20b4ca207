"""The activations no TOSA tensor is paired with, yet accounted for: the table of the ways the
lowering leaves an activation without a tensor of its own while the paired layers still judge
what the NPU computes, each with the test that shows it on a real model (ACCOUNTED_FOR).

An unpaired activation no entry accounts for is listed as unseen, so a verdict says what it could
not see (ethosweep.verify.locate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ethosweep.verify.layers import activation_inputs, is_exact, is_quantize, layer_sources, upstream
from ethosweep.verify.pairing import moves_its_input


@dataclass(frozen=True)
class Unseen:
    """A sample's activations once paired: what deciding whether an unpaired one is accounted for,
    and each paired layer's error, need to know."""

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
        if names & set(recorded["sources"])
        and t in tosa_values[p]
        and not moves_its_input((p, t), tensor_sources, names)  # its input's layout, not its result
    ]
    # an accumulator: int32, or an int16 convolution's INT48, which the reference model cannot
    # return (it leaves an empty array); a tensor of another size is not it (the SLICE a strided
    # convolution's lowering makes of its input carries the convolution's name)
    if not named or any(value.dtype != np.int32 and value.size == size for value in named):
        return False  # not in the TOSA, or there in its own type: it should have been paired
    consumers = [a for a in activations if node in activation_inputs(a)]
    return bool(consumers) and all(c.name in pairs for c in consumers)


def unpaired_before(node, boundaries: set[str], hidden: set[str], described: dict) -> list[str]:
    """The unpaired activations (`hidden`) between this one and the NPU values it is given (the
    forced boundaries), outside its own operator: the quantized model computes them itself, so
    this layer's inputs are not the NPU's, and an error in them shows up here."""
    own = described[node.name]["composite"]
    found = {
        described[n.name]["layer"]
        for n in upstream(node, lambda n: is_quantize(n) and n.name in boundaries)
        if n.name in hidden and described[n.name]["composite"] != own and n.name not in boundaries
    }
    return sorted(found)
