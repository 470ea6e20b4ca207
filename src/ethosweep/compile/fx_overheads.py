"""What torch.fx and ExecuTorch spend on a lowering for nothing, left out: the same programs, a
third less time.

ExecuTorch's Arm lowering runs ~150 passes over the graph. Four costs buy it nothing: node
provenance deep-copied at every pass (`shared_node_provenance`), Python code generated for every
intermediate graph no pass calls (`lazy_graph_code`), the export signature's lookups rebuilt on
every question (`remembered_signature_lookups`), and a last decomposition with nothing to
decompose (`without_idle_decompositions`, as pytorch/executorch#18496 proposes; it leaves two
provenance levels fewer in the edge program's nodes). Each is undone only while torch still has the
cost; the template, every TOSA partition and the edge program stay the same bytes
(tests/test_fx_overheads.py). The measurements, the profiles and the upstream reports are in
docs/performance.md, "Where a lowering's time goes"; all of this goes when torch and ExecuTorch change.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import weakref


def _deep_copies_provenance(node_source_class) -> bool:
    """Whether this torch's NodeSource still deep-copies its source node's list (the only thing
    shared_node_provenance changes); if torch changed how a NodeSource is made, leave it alone."""
    try:
        source = inspect.getsource(node_source_class.__init__)
    except (OSError, TypeError):
        return False
    return 'copy.deepcopy(node.meta["from_node"])' in source


@contextlib.contextmanager
def without_fx_overheads():
    """Within this block, none of the costs above (used as a decorator on the lowering)."""
    with shared_node_provenance(), lazy_graph_code(), remembered_signature_lookups():
        yield


def _edge_generation(program_module):
    """ExecuTorch's edge-program generation, where without_idle_decompositions expects it; if
    ExecuTorch moved it, None (and the re-trace runs)."""
    return getattr(program_module, "_gen_edge_manager_for_partitioners", None)


@contextlib.contextmanager
def without_idle_decompositions():
    """Within this block, ExecuTorch's edge-program generation skips a decomposition with nothing
    to decompose (see the module docstring): a call with a table none of whose operators is in the
    graph, after the first call (an empty table, which functionalizes) made it functional. A graph
    with control flow always runs it (its regions may decompose by rules of their own)."""
    from executorch.exir.graph_module import contains_any_call_fn_target_op, get_control_flow_submodules
    from executorch.exir.program import _program
    from torch.export import ExportedProgram

    generate = _edge_generation(_program)
    if generate is None:
        yield
        return
    torch_run = ExportedProgram.run_decompositions

    def generate_skipping_idle(*args, **kwargs):
        functionalized = []  # the programs an empty table's call returned, and those derived from them

        def run_unless_idle(program, decomp_table=None, *more, **options):
            graph_module = program.graph_module
            if (
                decomp_table
                and not more
                and not options
                and any(program is done for done in functionalized)
                and not get_control_flow_submodules(graph_module)
                and not contains_any_call_fn_target_op(graph_module, decomp_table)
            ):
                return program
            result = torch_run(program, decomp_table, *more, **options)
            if not decomp_table or any(program is done for done in functionalized):
                functionalized.append(result)
            return result

        ExportedProgram.run_decompositions = run_unless_idle
        try:
            return generate(*args, **kwargs)
        finally:
            ExportedProgram.run_decompositions = torch_run

    _program._gen_edge_manager_for_partitioners = generate_skipping_idle
    try:
        yield
    finally:
        _program._gen_edge_manager_for_partitioners = generate


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


def _has_lazy_graph_modules(graph_module_class) -> bool:
    """Whether this torch has the lazy kind of GraphModule and makes GraphModules as lazy_graph_code
    expects (a static `__new__`, which it wraps); if torch changed either, leave it alone."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:
        return False
    new = graph_module_class.__dict__.get("__new__")
    return isinstance(new, staticmethod) and issubclass(_LazyGraphModule, graph_module_class)


@contextlib.contextmanager
def lazy_graph_code():
    """Within this block, a plain GraphModule generates its Python code when first called or read."""
    from torch.fx import GraphModule

    if not _has_lazy_graph_modules(GraphModule):
        yield
        return
    from torch.fx._lazy_graph_module import _LazyGraphModule

    torch_new = GraphModule.__dict__["__new__"]

    def lazy_new(cls, *args, **kwargs):
        # torch's own __new__ (one class per instance), on the lazy subclass; subclasses stay theirs
        return torch_new.__func__(_LazyGraphModule if cls is GraphModule else cls, *args, **kwargs)

    GraphModule.__new__ = lazy_new
    try:
        yield
    finally:
        GraphModule.__new__ = torch_new


SIGNATURE_LOOKUPS = ("inputs_to_buffers", "inputs_to_parameters", "inputs_to_lifted_tensor_constants")


def _signature_lookups(signature_class) -> dict:
    """The lookups remembered_signature_lookups keeps, as this torch defines them (properties that
    read only `input_specs`); if torch changed them, none."""
    lookups = {name: signature_class.__dict__.get(name) for name in SIGNATURE_LOOKUPS}
    if not all(isinstance(lookup, property) for lookup in lookups.values()):
        return {}
    return {name: lookup.fget for name, lookup in lookups.items()}


@contextlib.contextmanager
def remembered_signature_lookups():
    """Within this block, an export signature's lookups are built once for the same inputs.

    The answer is kept beside the signature (not in it: ExecuTorch deep-copies programs, and a
    mapping proxy cannot be copied) with the input specs it was built from (the objects themselves,
    so their identities cannot be reused while kept) and a count of every change made to an input
    spec or an argument object (their `__setattr__`, counted within this block; the frozen ones
    cannot change): the same spec objects and no change since, the same answer."""
    from torch.export import graph_signature as gs

    lookups = _signature_lookups(gs.ExportGraphSignature)
    if not lookups:
        yield
        return
    changes = [0]
    kept: dict[int, tuple] = {}  # id(signature) -> (its weak reference, {lookup: entry})
    specs_and_arguments = [cls for name, cls in vars(gs).items() if name == "InputSpec" or name.endswith("Argument")]
    watched = [cls for cls in specs_and_arguments if isinstance(cls, type) and "__setattr__" not in cls.__dict__]

    def counting_setattr(self, name, value):
        changes[0] += 1
        object.__setattr__(self, name, value)

    def entries_of(signature) -> dict:
        key = id(signature)
        held = kept.get(key)
        if held is None or held[0]() is not signature:
            held = (weakref.ref(signature, lambda _ref, key=key: kept.pop(key, None)), {})
            kept[key] = held
        return held[1]

    def remembered(name, build):
        def lookup(signature):
            specs = signature.input_specs
            identities = tuple(map(id, specs))
            entries = entries_of(signature)
            entry = entries.get(name)
            if entry is not None and entry[0] == changes[0] and entry[1] == identities:
                return entry[3]
            answer = build(signature)
            entries[name] = (changes[0], identities, tuple(specs), answer)
            return answer

        return property(lookup)

    for cls in watched:
        cls.__setattr__ = counting_setattr
    for name, build in lookups.items():
        setattr(gs.ExportGraphSignature, name, remembered(name, build))
    try:
        yield
    finally:
        for name, build in lookups.items():
            setattr(gs.ExportGraphSignature, name, property(build))
        for cls in watched:
            del cls.__setattr__
