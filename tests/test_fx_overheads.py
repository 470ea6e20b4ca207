"""What torch.fx and ExecuTorch spend on a lowering for nothing, left out
(ethosweep.compile.fx_overheads): a NodeSource reads as torch makes it, a lazy GraphModule computes
and reads as torch's, a remembered signature lookup answers as torch's after any change to the
inputs, a lowering gives the same bytes with torch's overheads and without, and the same program
without ExecuTorch's idle re-trace, whose only trace is in the nodes' provenance."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from ethosweep.compile import fx_overheads
from ethosweep.compile.fx_overheads import lazy_graph_code, remembered_signature_lookups, shared_node_provenance


def provenance_chain(node, passes: int):
    """`node` made by `passes` passes, as a pass manager leaves it: each level holds the last."""
    from torch.fx.traceback import NodeSource, NodeSourceAction

    node.meta["from_node"] = [NodeSource(None, "tracer", NodeSourceAction.CREATE)]
    for index in range(passes):
        node.meta["from_node"] = [NodeSource(node, f"pass_{index}", [NodeSourceAction.REPLACE])]


def test_this_torch_still_deep_copies_node_provenance():
    from torch.fx.traceback import NodeSource

    # When this fails, torch no longer deep-copies: shared_node_provenance has nothing left to do, drop it.
    assert fx_overheads._deep_copies_provenance(NodeSource)


def test_a_node_source_reads_as_torch_makes_it_and_shares_its_sources():
    import torch
    from torch.fx.traceback import NodeSource, NodeSourceAction

    graph = torch.fx.symbolic_trace(torch.nn.ReLU()).graph
    node = next(n for n in graph.nodes if n.op == "call_function")
    provenance_chain(node, passes=5)
    torch_init = NodeSource.__init__

    torchs = NodeSource(node, "next_pass", NodeSourceAction.CREATE)
    with shared_node_provenance():
        ours = NodeSource(node, "next_pass", NodeSourceAction.CREATE)
    assert NodeSource.__init__ is torch_init  # restored after the block

    assert ours.to_dict() == torchs.to_dict()
    assert ours.print_readable() == torchs.print_readable()
    assert ours.from_node[0] is node.meta["from_node"][0]  # shared, not copied
    node.meta["from_node"].append(NodeSource(None, "later", NodeSourceAction.CREATE))
    assert len(ours.from_node) == len(torchs.from_node) == 1  # what happens to the node later is not ours


def test_a_lazy_graph_module_computes_and_reads_as_torchs_and_makes_its_code_only_when_used():
    import torch
    from torch.fx import GraphModule
    from torch.fx._lazy_graph_module import _LazyGraphModule

    class Block(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2) + 1

    traced = torch.fx.symbolic_trace(Block())
    torchs = GraphModule(traced, traced.graph)
    with lazy_graph_code():
        ours = GraphModule(traced, traced.graph)
    assert type(GraphModule(traced, traced.graph)).__mro__[1] is GraphModule  # torch's way after the block

    assert isinstance(ours, _LazyGraphModule) and ours._needs_recompile()  # no code made yet
    x = torch.arange(-3.0, 3.0)
    assert torch.equal(ours(x), torchs(x))
    assert not ours._needs_recompile()  # made when called
    assert ours.code == torchs.code


def test_a_remembered_signature_lookup_answers_as_torchs_after_every_kind_of_change():
    import copy
    import dataclasses

    import torch
    from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.norm = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.norm(self.conv(x))

    signature = torch.export.export(Block().eval(), (torch.rand(1, 3, 8, 8),)).graph_signature
    lookups = fx_overheads.SIGNATURE_LOOKUPS
    torch_lookups = {name: ExportGraphSignature.__dict__[name] for name in lookups}

    def torchs():
        return {name: dict(torch_lookups[name].fget(signature)) for name in lookups}

    def ours():
        return {name: dict(getattr(signature, name)) for name in lookups}

    with remembered_signature_lookups():
        assert ours() == torchs() and ours()["inputs_to_buffers"]  # running_mean, running_var, ...
        assert signature.inputs_to_buffers is signature.inputs_to_buffers  # built once
        buffer = next(spec for spec in signature.input_specs if spec.kind == InputKind.BUFFER)
        buffer.arg.name = "renamed"  # an argument changed in place
        assert ours() == torchs() and "renamed" in signature.inputs_to_buffers
        buffer.kind = InputKind.PARAMETER  # a spec changed in place
        assert ours() == torchs() and "renamed" in signature.inputs_to_parameters
        signature.input_specs.append(InputSpec(InputKind.BUFFER, TensorArgument("added"), "added", True))
        assert ours() == torchs() and "added" in signature.inputs_to_buffers  # a spec added
        signature.input_specs[-1] = dataclasses.replace(signature.input_specs[-1], target="replaced")
        assert ours() == torchs() and signature.inputs_to_buffers["added"] == "replaced"  # a spec replaced
        del signature.input_specs[-1]
        assert ours() == torchs() and "added" not in signature.inputs_to_buffers  # a spec removed
        copied = copy.deepcopy(signature)  # ExecuTorch deep-copies programs: nothing kept in them
        assert dict(copied.inputs_to_buffers) == dict(signature.inputs_to_buffers)
    assert "__setattr__" not in TensorArgument.__dict__ and "__setattr__" not in InputSpec.__dict__
    assert all(
        ExportGraphSignature.__dict__[name].fget is torch_lookups[name].fget for name in lookups
    )  # torch's again after the block


def test_a_lowering_gives_the_same_bytes_without_torch_fxs_overheads(tmp_path, monkeypatch):
    from ethosweep.verify.chain import export, lower, quantize

    export(tmp_path, {"name": "blocks", "file": "tests/models/inverted_residuals.py"})
    quantize(tmp_path, "blocks")
    ours = lower(tmp_path, "blocks", into="ours")
    # torch's way: all three switched off where their real switches are
    monkeypatch.setattr(fx_overheads, "_deep_copies_provenance", lambda node_source_class: False)
    monkeypatch.setattr(fx_overheads, "_has_lazy_graph_modules", lambda graph_module_class: False)
    monkeypatch.setattr(fx_overheads, "_signature_lookups", lambda signature_class: {})
    torchs = lower(tmp_path, "blocks", into="torchs")

    for name in ("template.pte", "delegation.json", "tosa_sources.json"):
        assert (ours / name).read_bytes() == (torchs / name).read_bytes(), name
    partitions = sorted(p.name for p in (ours / "tosa").iterdir())
    assert partitions and partitions == sorted(p.name for p in (torchs / "tosa").iterdir())
    for name in partitions:
        assert (ours / "tosa" / name).read_bytes() == (torchs / "tosa" / name).read_bytes(), name
    assert edge_program(ours / "edge.pt2") == edge_program(torchs / "edge.pt2")


def edge_program(path: Path) -> dict[str, bytes]:
    """An edge program's archive, member by member, with each provenance entry's graph id (a Python
    object id: different in every process) taken out."""
    with zipfile.ZipFile(path) as archive:
        members = {Path(info.filename).name: archive.read(info) for info in archive.infolist()}
    return {
        name: re.sub(rb'graph_id[\\"]*: -?\d+', b"graph_id", data) if name.endswith(".json") else data
        for name, data in members.items()
    }


def test_a_lowering_gives_the_same_program_without_the_idle_decomposition(tmp_path, monkeypatch):
    """ExecuTorch's third decomposition finds nothing to decompose and is skipped: the template, the
    TOSA and the delegation table are the same bytes, the edge program too but for its nodes'
    provenance (the skipped re-trace's levels), and tosa_sources.json names the same tensors of the
    model: only intermediate names the re-trace carried, which no quantized program has, are gone."""
    from torch.export import ExportedProgram

    from ethosweep.compile.artifacts import load_quantized
    from ethosweep.verify.chain import export, lower, quantize

    export(tmp_path, {"name": "blocks", "file": "tests/models/inverted_residuals.py"})
    quantize(tmp_path, "blocks")
    runs = []
    torch_run = ExportedProgram.run_decompositions

    def counted(program, table=None, *args, **kwargs):
        runs.append(len(table) if table is not None else None)
        return torch_run(program, table, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counted)
    ours = lower(tmp_path, "blocks", into="ours")
    ours_runs, runs[:] = list(runs), []
    monkeypatch.setattr(fx_overheads, "_edge_generation", lambda program_module: None)  # ExecuTorch's way
    torchs = lower(tmp_path, "blocks", into="torchs")
    torchs_runs = list(runs)
    # both run the first (an empty table: it functionalizes) and the second (it decomposes); ours not the last
    assert ours_runs[0] == torchs_runs[0] == 0 and len(torchs_runs) == len(ours_runs) + 1, (ours_runs, torchs_runs)

    for name in ("template.pte", "delegation.json"):
        assert (ours / name).read_bytes() == (torchs / name).read_bytes(), name
    for partition in sorted((torchs / "tosa").iterdir()):
        assert (ours / "tosa" / partition.name).read_bytes() == partition.read_bytes(), partition.name
    ours_edge, torchs_edge = edge_program(ours / "edge.pt2"), edge_program(torchs / "edge.pt2")
    assert ours_edge != torchs_edge  # the provenance differs ...
    assert without_provenance(ours_edge) == without_provenance(torchs_edge)  # ... and nothing else
    assert provenance_depth(ours_edge) < provenance_depth(torchs_edge)

    quantized_names = {node.name for node in load_quantized(str(tmp_path / "blocks.pt2")).graph.nodes}
    ours_sources = json.loads((ours / "tosa_sources.json").read_text())
    torchs_sources = json.loads((torchs / "tosa_sources.json").read_text())
    assert [list(p) for p in ours_sources] == [list(p) for p in torchs_sources]  # the same tensors
    dropped = set()
    for ours_partition, torchs_partition in zip(ours_sources, torchs_sources):
        for tensor, recorded in torchs_partition.items():
            own = ours_partition[tensor]
            assert {k: v for k, v in own.items() if k != "sources"} == {
                k: v for k, v in recorded.items() if k != "sources"
            }, tensor
            assert own["sources"][-1:] == recorded["sources"][-1:], tensor  # the model's node: the same
            assert set(own["sources"]) <= set(recorded["sources"]), tensor
            dropped |= set(recorded["sources"]) - set(own["sources"])
    assert dropped and not dropped & quantized_names, sorted(dropped & quantized_names)


def without_provenance(members: dict[str, bytes]) -> dict:
    """An edge program's members with every node's `from_node` taken out (also inside the JSON
    strings that hold the delegates' own programs)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "from_node"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str) and value.startswith("{") and "from_node" in value:
            return strip(json.loads(value))
        return value

    return {name: strip(json.loads(data)) if name.endswith(".json") else data for name, data in members.items()}


def provenance_depth(members: dict[str, bytes]) -> int:
    """How many provenance levels an edge program's nodes carry in all (each `from_node` key is one)."""
    return sum(data.count(b"from_node") for name, data in members.items() if name.endswith(".json"))
