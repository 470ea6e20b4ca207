"""Which exported nodes each TOSA tensor comes from, and in which layout, recorded while lowering.

The lower stage records it (tosa_sources.json) so that the verify stage can pair the quantized
model's activations with the TOSA tensors that compute them (ethosweep.verify.locate), without
lowering again:

- `sources`: the exported nodes a tensor descends from (ExecuTorch keeps them in `from_node`);
- `inputs`: the tensors the operator producing it reads (the TOSA graph's data flow: some
  operators ExecuTorch adds, such as the TABLE of a GELU or an rsqrt, carry no provenance, and
  are found downstream of their input);
- `order`: how the tensor's dimensions relate to the PyTorch tensor it stands for, as the
  permutation the TOSA graph applied to it (TOSA tensor = PyTorch tensor.permute(order)): ExecuTorch
  1.5 writes layout changes as explicit TRANSPOSE operators (a convolution runs on NHWC between a
  transpose in and a transpose out), so the order follows from the graph, not from the shape,
  which cannot tell NCHW from NHWC when C == H == W.
"""

from __future__ import annotations

import contextlib


def node_sources(node) -> list[str]:
    """The names this node descends from (`from_node` provenance), nearest first."""
    chain, source = [], node.meta.get("from_node")
    while source:
        current = source[-1] if isinstance(source, list) else source
        name = getattr(current, "name", None)
        if name and name not in chain:
            chain.append(name)
        source = getattr(current, "from_node", None)
    return chain


def module_path(node) -> str:
    """The path of the innermost nn.Module a node belongs to ('features.3.conv.1'), or ''."""
    stack = node.meta.get("nn_module_stack") or {}
    return str(list(stack.values())[-1][0]) if stack else ""


def _rank(node) -> int | None:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return len(value.shape) if hasattr(value, "shape") else None


def _first_tensor_input(node):
    for arg in node.args:
        if isinstance(arg, (list, tuple)):
            arg = next((a for a in arg if hasattr(a, "meta")), None)
        if hasattr(arg, "meta") and _rank(arg) is not None:
            return arg
    return None


def _permutation(node) -> list[int] | None:
    """The permutation a node applies to its input's dimensions: a transpose's (TOSA TRANSPOSE or
    aten permute_copy), or a reshape's that only moves size-1 dimensions (ExecuTorch turns a
    transpose of a 1-channel tensor, NCHW (1, 1, 28, 28) to NHWC (1, 28, 28, 1), into such a
    reshape); else None."""
    name = str(node.target)
    if "TRANSPOSE" in name or "permute" in name:
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dims") or node.kwargs.get("perms")
        return [int(d) for d in dims] if isinstance(dims, (list, tuple)) else None
    if "RESHAPE" in name or "view" in name:
        source = _first_tensor_input(node)
        if source is not None:
            return singleton_move(tuple(source.meta["val"].shape), tuple(node.meta["val"].shape))
    return None


def singleton_move(before: tuple, after: tuple) -> list[int] | None:
    """The permutation a reshape amounts to if it only moves size-1 dimensions (the other ones
    keep their order; size-1 ones are matched in order), else None."""
    if len(before) != len(after) or sorted(before) != sorted(after):
        return None
    sized_before = [i for i, d in enumerate(before) if d != 1]
    if [before[i] for i in sized_before] != [d for d in after if d != 1]:
        return None
    sized, ones = iter(sized_before), iter(i for i, d in enumerate(before) if d == 1)
    return [next(sized) if d != 1 else next(ones) for d in after]


def dimension_orders(graph_module) -> dict[str, list[int] | None]:
    """Each tensor's order (see the module docstring), propagated through the graph: inputs and
    constants are in PyTorch's order; a transpose composes its permutation onto its input's order;
    any other operator whose output has the rank of its first tensor input keeps that input's
    order (elementwise operators, rescales, table lookups, a convolution between its transposes); a
    reshape of a tensor in PyTorch's order starts a tensor of its own in PyTorch's order. A reshape
    of a transposed tensor (flattening NHWC) puts its elements in no permutation of any PyTorch
    tensor's order: None, unknown, and so is everything computed from it (the verify stage then
    compares such a tensor in the layout its values say, ethosweep.verify.locate)."""
    orders: dict[str, list[int] | None] = {}
    for node in graph_module.graph.nodes:
        rank = _rank(node)
        if rank is None:
            continue
        source = _first_tensor_input(node) if node.op == "call_function" else None
        if source is None:
            orders[node.name] = list(range(rank))
            continue
        inherited = orders.get(source.name, list(range(_rank(source) or rank)))
        permutation = _permutation(node)
        reshape = "RESHAPE" in str(node.target) or "view" in str(node.target)
        if inherited is None:
            orders[node.name] = None
        elif permutation is not None and len(permutation) == len(inherited):
            orders[node.name] = [inherited[p] for p in permutation]
        elif len(inherited) == rank and not reshape:
            orders[node.name] = list(inherited)
        elif inherited == list(range(len(inherited))):
            orders[node.name] = list(range(rank))
        else:
            orders[node.name] = None
    return orders


def _input_names(node) -> list[str]:
    names = []
    for arg in node.args:
        for item in arg if isinstance(arg, (list, tuple)) else [arg]:
            if hasattr(item, "name") and hasattr(item, "op"):
                names.append(item.name)
    return names


@contextlib.contextmanager
def recording_tensor_sources():
    """While lowering: for each partition, in order, TOSA tensor name -> {"sources": node_sources(),
    "order": its dimension order}, from the graph ExecuTorch's Arm pass pipeline hands to the TOSA
    serialiser (tensor names are node names)."""
    from executorch.backends.arm._passes import arm_pass_manager

    original = arm_pass_manager.ArmPassManager.transform_to_backend_pipeline
    recorded: list[dict[str, dict]] = []

    def transform(self, *args, **kwargs):
        graph_module = original(self, *args, **kwargs)
        orders = dimension_orders(graph_module)
        recorded.append(
            {
                n.name: {
                    "sources": node_sources(n),
                    "order": orders.get(n.name),
                    "inputs": _input_names(n),
                    # the model's nn.Module the node belongs to (what a report and keep_on_cpu name)
                    "module": module_path(n),
                }
                for n in graph_module.graph.nodes
                if n.op == "call_function"
            }
        )
        return graph_module

    arm_pass_manager.ArmPassManager.transform_to_backend_pipeline = transform
    try:
        yield recorded
    finally:
        arm_pass_manager.ArmPassManager.transform_to_backend_pipeline = original
