"""Which exported nodes each TOSA tensor comes from, recorded while lowering.

The lower stage records it (tosa_sources.json) so that the verify stage can pair the quantized
model's activations with the TOSA tensors that compute them (ethosweep.verify.locate), without
lowering again.
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


@contextlib.contextmanager
def recording_tensor_sources():
    """While lowering: for each partition, in order, TOSA tensor name -> node_sources(), from the
    graph ExecuTorch's Arm pass pipeline hands to the TOSA serialiser (tensor names are node names)."""
    from executorch.backends.arm._passes import arm_pass_manager

    original = arm_pass_manager.ArmPassManager.transform_to_backend_pipeline
    recorded: list[dict[str, list[str]]] = []

    def transform(self, *args, **kwargs):
        graph_module = original(self, *args, **kwargs)
        recorded.append({n.name: node_sources(n) for n in graph_module.graph.nodes if n.op == "call_function"})
        return graph_module

    arm_pass_manager.ArmPassManager.transform_to_backend_pipeline = transform
    try:
        yield recorded
    finally:
        arm_pass_manager.ArmPassManager.transform_to_backend_pipeline = original
