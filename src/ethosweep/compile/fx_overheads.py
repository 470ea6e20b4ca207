"""What torch.fx and ExecuTorch spend on a lowering for nothing, left out: the same programs, a
third less time.

ExecuTorch's Arm lowering runs ~150 passes over the graph. Three costs grow with the passes or the
graph and buy the lowering nothing (docs/performance.md, "Where a lowering's time goes");
`without_fx_overheads()` removes them, only while torch still has them, and the lowered programs,
TOSA partitions and edge programs stay the same bytes (tests/test_fx_overheads.py; the default
matrix and a preset, docs/performance.md). A fourth, a re-trace ExecuTorch runs with nothing to do,
`without_idle_decompositions()` leaves out, with the same programs and one trace of its absence in
the nodes' provenance (below). All to go when torch and ExecuTorch change (upstream reports in that
document).

**Node provenance, deep-copied.** torch.fx records where every node comes from
(`node.meta["from_node"]`, a list of `torch.fx.traceback.NodeSource`, each holding the list its
source node had). Every new NodeSource deep-copies its source node's whole list, and each pass adds
a level, so the copies grow with the pass count (~15 % of a MobileNetV2 lowering). A NodeSource is
never changed after it is made, and torch itself shares them (every node a tracer creates gets a
shallow copy of the current meta's `from_node`, torch.fx.proxy). `shared_node_provenance()` makes a
NodeSource share its source's list entries instead (one shallow copy of the list), exactly as a
deep copy would read.

**Python code generated for every intermediate graph.** Every `torch.fx.GraphModule` generates and
compiles Python source for its graph when it is made and whenever its graph is replaced
(`recompile`): ExecuTorch's passes make a new GraphModule per pass, ~380 code generations in a
MobileNetV2 lowering (~25 % of its time), while the passes walk the graph and never call that code.
torch has the remedy, `_LazyGraphModule` (the code is generated when first called or read), but
turns it on only for modules made through its own factory, which ExecuTorch's passes do not use.
`lazy_graph_code()` makes every plain GraphModule made inside it lazy; a module whose code is
called or read (calibration, `print`) generates it then, the same code.

**The export signature's lookups, rebuilt on every question.** `ExportGraphSignature`'s
`inputs_to_buffers`, `inputs_to_parameters` and `inputs_to_lifted_tensor_constants` build a new
mapping from all the program's inputs each time they are read, and the passes ask them once per
node (`torch._export.utils.is_buffer`, `get_buffer`, ...): quadratic in the graph's size (RegNetX-400MF,
~700 inputs, lowered in 78 s with them, 71 s without). `remembered_signature_lookups()` keeps each signature's last
answer while its inputs are the same objects and none of them (nor their arguments) was changed.

**A decomposition with nothing to decompose.** ExecuTorch's edge-program generation
(`_gen_edge_manager_for_partitioners`) re-exports the program through torch.export's
`run_decompositions` up to three times. The last, with the default decomposition table, finds
nothing to decompose in the graphs ethosweep lowers (the previous one decomposed them) and only
re-traces every node (8-10 % of a lowering). ExecuTorch already skips such a call on its other path
("safe to skip when none of those targets occur in the graph"); `without_idle_decompositions()` skips
it on the Arm partitioner's path too, as pytorch/executorch#18496 proposes upstream. Unlike the
three above it leaves one trace in the output: the edge program's nodes have two provenance levels
fewer (the re-trace's own, `ExportedProgram.module()` and `Interpreter_PropagateUnbackedSymInts`),
and tosa_sources.json loses the intermediate names they carried (`convolution_9` between the TOSA
tensor and the model's `conv2d_9`, a name no model or quantized program has). The template, every
TOSA partition, the delegation table and everything else in the edge program are the same bytes
(tests/test_fx_overheads.py; the default matrix and a preset, docs/performance.md).
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
