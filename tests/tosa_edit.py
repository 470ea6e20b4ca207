"""Editing a lowered partition's TOSA, for tests that need a real discrepancy or a Vela crash.

Everything goes through the tools the workflow uses: tosa_serializer reads and writes the
flatbuffer, ExecuTorch's serialisers write the edge program and the template, and the lower
stage's record (lower.json) is kept consistent, so the stages after it accept the result.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import numpy as np

from ethosweep.runtime.io import read_json, write_json


def negate_first_conv2d_weights(tosa: bytes, nth: int = 0) -> tuple[bytes, str]:
    """The TOSA with half the weights of its first CONV2D (or its `nth`, from 0) negated, and that weight
    tensor's name."""
    import tosa_serializer as ts

    with tempfile.TemporaryDirectory() as tmp:  # the serializer's own folder
        path = Path(tmp) / "partition.tosa"
        path.write_bytes(tosa)
        graph = ts.TosaSerializer(tmp)
        assert graph.loadTosaFlatbuffer(str(path))
        block = graph.regions[0].basicBlocks[0]
        conv = [op for op in block.operators if str(op.op) == "Op.CONV2D"][nth]
        weights = block.getTensorByName(conv.inputs[1])
        values = np.frombuffer(bytes(weights.data), np.int8).copy()
        values[: len(values) // 2] = -values[: len(values) // 2]
        weights.data = list(values.tobytes())
        return bytes(graph.serialize()), conv.inputs[1]


def zero_size_tosa() -> bytes:
    """A TOSA flatbuffer Vela's compiler crashes on: a CLAMP over a tensor with a dimension of
    size 0 (a valid flatbuffer, so Vela reads it; Vela 5.1 then dies from SIGSEGV for Ethos-U55
    and SIGFPE for Ethos-U85)."""
    import tosa_serializer as ts

    with tempfile.TemporaryDirectory() as tmp:  # the serializer writes the placeholder's data there
        graph = ts.TosaSerializer(tmp, targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
        x = graph.addPlaceholder([1, 0, 8, 8], ts.DType.INT8, np.zeros([1, 1, 8, 8], np.int8))
        y = graph.addIntermediate([1, 0, 8, 8], ts.DType.INT8)
        clamp = ts.TosaSerializerAttribute()
        clamp.ClampAttribute([156], [100], nan_mode=ts.NanPropagationMode.PROPAGATE)  # int8 -100..100
        graph.addOperator(ts.Op.CLAMP, [x.name], [y.name], clamp)
        graph.addOutputTensor(y)
        return bytes(graph.serialize())


def replace_partition_tosa(lowered: Path, tosa: bytes, template: bool = True, edge: bool = True) -> None:
    """Put `tosa` in place of partition 0 in the lower stage's outputs: the template the cells are
    compiled from and/or the edge program the verify stage runs, and lower.json to match."""
    record = read_json(lowered / "lower.json")
    if template:
        from executorch.exir._serialize._program import deserialize_pte_binary

        from ethosweep.vela.compile import assemble_pte

        data = (lowered / "template.pte").read_bytes()
        delegate = deserialize_pte_binary(data).program.execution_plan[0].delegates[0]
        crafted = assemble_pte(data, [tosa], [(s.key, bytes(s.value)) for s in delegate.compile_specs])
        (lowered / "template.pte").write_bytes(crafted)
        (lowered / "tosa/partition_0.tosa").write_bytes(tosa)
        record.update(template_bytes=len(crafted), template_sha256=hashlib.sha256(crafted).hexdigest())
        record["partitions"][0].update(tosa_bytes=len(tosa), tosa_sha256=hashlib.sha256(tosa).hexdigest())
    if edge:
        from executorch.exir.serde.serialize import save

        from ethosweep.compile.artifacts import load_edge

        program = load_edge(lowered / "edge.pt2")
        program.graph_module.lowered_module_0._processed_bytes = tosa
        save(program, lowered / "edge.pt2")
        data = (lowered / "edge.pt2").read_bytes()
        record.update(edge_bytes=len(data), edge_sha256=hashlib.sha256(data).hexdigest())
    write_json(lowered / "lower.json", record)
