"""Node provenance without the deep copies: the lowering's largest cost that is not its own work.

torch.fx records where every node comes from (`node.meta["from_node"]`, a list of
`torch.fx.traceback.NodeSource`, each holding the list its source node had). Every new
NodeSource deep-copies its source node's whole list, and each of the Arm backend's ~150 passes
adds a level, so the copies grow with the pass count: on MobileNetV2 they took ~15 % of a
lowering (docs/performance.md). The deep copy buys nothing: a NodeSource is never changed after it is
made, and torch itself shares them (every node a tracer creates gets a shallow copy of the
current meta's `from_node`, torch.fx.proxy). `shared_node_provenance()` makes a NodeSource
share its source's list entries instead (one shallow copy of the list), exactly as a deep copy
would read; the lowered programs, TOSA partitions and edge programs are the same bytes
(tests/test_node_provenance.py; the default matrix, docs/performance.md). To go when torch stops
deep-copying (upstream report: docs/performance.md, "Where a lowering's time goes").
"""

from __future__ import annotations

import contextlib
import copy
import inspect


def _deep_copies_provenance(node_source_class) -> bool:
    """Whether this torch's NodeSource still deep-copies its source node's list (the only thing
    shared_node_provenance changes); if torch changed how a NodeSource is made, leave it alone."""
    try:
        source = inspect.getsource(node_source_class.__init__)
    except (OSError, TypeError):
        return False
    return 'copy.deepcopy(node.meta["from_node"])' in source


@contextlib.contextmanager
def shared_node_provenance():
    """Within this block, a new NodeSource shares its source node's provenance entries."""
    from torch.fx.traceback import NodeSource

    if not _deep_copies_provenance(NodeSource):
        yield
        return
    torch_init = NodeSource.__init__

    def sharing_init(self, node, pass_name="", action=None):
        torch_init(self, None, pass_name, action)  # the pass name, the action and the caches
        if node:
            self.node_info = self.NodeInfo(name=node.name, target=str(node.target), graph_id=id(node.graph))
            sources = node.meta.get("from_node", [])
            self.from_node = list(sources) if isinstance(sources, list) else copy.deepcopy(sources)

    NodeSource.__init__ = sharing_init
    try:
        yield
    finally:
        NodeSource.__init__ = torch_init
