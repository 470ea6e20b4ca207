"""What a layer of the quantized model is: the nodes between a quantize node and the ones before it,
the model operator they come from, how wide its activation is, and where in the model it sits.

A layer is named by its quantize node (its int8/int16 activation: what the NPU holds between
layers). ExecuTorch's quantizer decomposes some operators (layer_norm, softmax, gelu) into several
quantized ones and keeps where each came from in `from_node`: a layer's `kind` and `composite`
are the operator it was decomposed from, so a decomposition is judged as one operator.
"""

from __future__ import annotations

from typing import Callable

import torch


def _outermost_source(node):
    """The node a node was decomposed from, outermost first (its `from_node` chain's end), or None."""
    source, root = node.meta.get("from_node"), None
    while source:
        current = source[-1] if isinstance(source, list) else source
        root = current
        source = getattr(current, "from_node", None)
    return root


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


def upstream(quantize_node, stop: Callable[[object], bool]):
    """The nodes upstream of a layer's operators, nearest first along each path, up to and
    including the first on each path where `stop` holds (it is not looked past)."""
    seen = set()
    todo = [i for s in layer_sources(quantize_node) for i in s.all_input_nodes]
    while todo:
        current = todo.pop()
        if current in seen or not hasattr(current, "op"):
            continue
        seen.add(current)
        yield current
        if not stop(current):
            todo.extend(current.all_input_nodes)


def activation_inputs(quantize_node) -> list:
    """The activations (quantize nodes) a layer reads: the nearest ones upstream of its operators."""
    return [node for node in upstream(quantize_node, is_quantize) if is_quantize(node)]


def activation_bits(quantize_node) -> int:
    """16 for an int16 activation (a16w8), else 8."""
    return 16 if torch.int16 in (quantize_node.args[-1], quantize_node.kwargs.get("dtype")) else 8


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


def operator_kind(sources: list) -> str:
    """The model's operator a layer comes from: the outermost operator its nodes were decomposed from
    (ExecuTorch's quantizer decomposes layer_norm, softmax, gelu into several quantized operators,
    and keeps where each came from in `from_node`), else the layer's own first operator."""
    for node in sources:
        root = _outermost_source(node)
        name = _target_name(str(getattr(root, "target", "") or ""))
        if name and not name.startswith(("quantize", "dequantize")):
            return name
    return _op_name(sources[0]) if sources else ""


def composite_root(sources: list) -> str:
    """The name of the model operator a layer was decomposed from (its outermost `from_node`), the
    same for every operator of one decomposition; the layer's own first node if it has none."""
    for node in sources:
        root = _outermost_source(node)
        if getattr(root, "name", None):
            return root.name
    return sources[0].name


def internal_activations(activations: list, order: dict) -> set[str]:
    """The activations inside a decomposed operator: every one of its activations but the last."""
    groups: dict[str, list] = {}
    for node in activations:
        groups.setdefault(composite_root(sorted(layer_sources(node), key=order.get)), []).append(node)
    return {n.name for nodes in groups.values() for n in sorted(nodes, key=order.get)[:-1]}


# Operators that only move values (no arithmetic, no rounding): an activation they make is the NPU's
# input activation moved. It is never paired (recomputed from its input, it cannot differ, and its
# TOSA tensor, often a flattened transposed one, could only be misread), and hides nothing.
# (Not cat: its inputs may be requantized to a common scale.)
EXACT_OPS = frozenset(
    {"reshape", "view", "_unsafe_view", "flatten", "unflatten", "permute", "transpose", "squeeze", "unsqueeze"}
    | {"expand", "t", "dropout", "clone", "alias", "detach", "contiguous", "_to_copy", "to"}
    | {"unbind", "getitem", "select", "slice", "narrow", "split", "split_with_sizes", "chunk"}
)


def layer_ops(quantize_node) -> str:
    return " + ".join(_op_name(n) for n in layer_sources(quantize_node))


def is_exact(ops: str) -> bool:
    return all(op.strip() in EXACT_OPS for op in ops.split("+"))


def _target_name(target: str) -> str:
    """'aten.layer_norm.default' or 'aten::layer_norm' -> 'layer_norm'; '' for none."""
    parts = [p for p in target.replace("::", ".").split(".") if p]
    if parts and parts[0] in ("aten", "torch", "ops", "quantized_decomposed", "edge", "exir_ops"):
        parts = parts[1:]
    name = parts[0] if parts else ""
    return "" if name == "None" else name.removeprefix("aten_")


def _op_name(node) -> str:
    return operator_name(node.target)


def operator_name(target) -> str:
    """An operator's short name: aten.conv2d.default, an edge dialect's aten.avg_pool2d.default,
    aten_convolution_default -> conv2d, avg_pool2d, convolution_default."""
    return _target_name(getattr(target, "__name__", None) or str(target))


def _module_path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""
