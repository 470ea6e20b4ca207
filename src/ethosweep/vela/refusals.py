"""When Vela refuses a partition: which of its operators it cannot compile, in the model's terms.

Vela stops at the first operator it cannot place and names only its type ("Non-passthrough
operation (Conv2D) could not run on NPU"): not which of MobileNetV2's 52 convolutions. This
module finds them by compiling parts of the partition's TOSA with the same Vela, the same flags
and the same accelerator, bisecting over its operators:

- the operators are grouped in *units* that never separate two operators joined by an
  accumulator (an INT32 or INT48 tensor: a convolution's result before its RESCALE, an int32
  residual add): Vela only accepts an int16 convolution fused with its RESCALE, and a part cut
  between them would be refused for the cut, not for the model;
- a part that compiles holds no refused unit; one that does not is split in two, and each half
  tried again; a single unit that does not compile is refused; when neither half of a failing
  part fails alone, units are dropped from it while it still fails, and the few left (which fail
  only together) are reported as one;
- each try is one Vela run on a small TOSA graph (the part's operators, their constants, the
  tensors entering it as inputs, those leaving it as outputs), well under a second, and the
  number of tries is bounded (`MAX_TRIES`).

The refused units are named by the model's nodes their tensors come from (the lower stage's
tosa_sources.json: the exported nodes and nn.Module path of each TOSA tensor) with the operator,
its shapes and its element types. Torch-free.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ethosweep.compile.tosa_graph import loaded

# Vela runs at most this many times to locate the refused operators of one partition: a
# bisection finds k refused units among n in about 2k*log2(n) tries; past it, what is left is
# reported as it stands (docs/failures.md has the runs it took on the presets).
MAX_TRIES = 64
# ... and when Vela crashed: what crashes it can need several units together (found by dropping
# units from a crashing part, Zeller's ddmin, after the bisection), about 30 tries per place it
# crashes, and a crashing try is short (MobileViT-XXS's six places: docs/zoos.md).
MAX_TRIES_CRASHED = 384
# Tensors that never cross a unit's boundary: a layer's accumulator before its RESCALE.
ACCUMULATORS = ("DType.INT32", "DType.INT48")
# Operators that carry no work of their own (constants, shapes, reshapes, which Vela passes
# through): constants go with the units that read them, the others are left out of the parts.
BOOKKEEPING = ("Op.CONST", "Op.CONST_SHAPE", "Op.RESHAPE")
# When Vela crashes, its reshapes stay in the parts as units of their own: a crash can lie in how
# Vela passes one through (MobileViT-XXS int8 on Ethos-U55: a 5-D SLICE, its RESHAPE to 4-D and a
# MUL crash Vela 5.1.0 together; without the RESHAPE every part compiles).
CONSTANTS = ("Op.CONST", "Op.CONST_SHAPE")
# Operators that join two tensors value by value (a residual add): see Refused.joins.
ELEMENTWISE = ("ADD", "SUB", "MUL")
_NUMPY = {"DType.INT8": np.int8, "DType.INT16": np.int16, "DType.INT32": np.int32, "DType.BOOL": np.bool_}


@dataclass
class Refused:
    """One unit of a partition Vela refuses: its operators and what they are in the model."""

    operators: list[str]  # TOSA operator types, e.g. ["CONV2D", "RESCALE"]
    tensors: list[str]  # the TOSA tensors they produce
    nodes: list[str] = field(default_factory=list)  # the model's nodes they come from
    modules: list[str] = field(default_factory=list)  # their nn.Module paths
    description: str = ""  # 'features.3.conv.1 (conv2d, int16 in, 1x1, stride 1, 96 channels)'
    # the nodes of its elementwise operators (a residual add): what joins the accumulators that
    # tie the part together, and the first thing to keep on the CPU (the layers stay on the NPU)
    joins: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "operators": self.operators,
            "tensors": self.tensors,
            "nodes": self.nodes,
            "modules": self.modules,
            "description": self.description,
            "joins": self.joins,
        }


@dataclass
class Location:
    refused: list[Refused]
    tries: int
    units: int
    complete: bool  # False when MAX_TRIES ran out first
    minimal_tosa: bytes | None = None  # the smallest part that still fails, for the reproducer
    seconds: float = 0.0  # what locating cost (set by the caller, who runs Vela)
    compiled: int = 0  # how many of the tries compiled: none, and nothing was narrowed
    seeded: bool = False  # what another cell of the partition found, confirmed (_Search.confirmed)

    def as_dict(self) -> dict:
        return {"refused": [r.as_dict() for r in self.refused], **self.cost()}

    def cost(self) -> dict:
        """How much locating took: Vela runs, of how many units, whether it finished, seconds."""
        cost = {"tries": self.tries, "units": self.units, "complete": self.complete, "seconds": self.seconds}
        return cost | ({"seeded": True} if self.seeded else {})

    def stored(self) -> dict[str, bytes]:
        """The location as the store keeps it (ethosweep.runtime.cache.remembered): before it is
        named in the model's terms, which the lowering's sources do, not the TOSA."""
        found = {"refused": [r.as_dict() for r in self.refused], "tries": self.tries, "units": self.units}
        found |= {"complete": self.complete, "compiled": self.compiled, "seeded": self.seeded}
        return {"location": json.dumps(found).encode(), "minimal": self.minimal_tosa or b""}

    @classmethod
    def of_stored(cls, blobs: dict[str, bytes]) -> Location:
        found = json.loads(blobs["location"])
        refused = [Refused(**r) for r in found.pop("refused")]
        return cls(refused=refused, minimal_tosa=blobs["minimal"] or None, **found)


# ---- the partition's operators, and a part of them as a TOSA graph of its own ------------------


def units(tosa: bytes, passed: tuple[str, ...] = BOOKKEEPING) -> list[list[int]]:
    """The partition's operators (indices, in graph order) grouped so that no accumulator crosses
    from one group to another; the `passed` operators are left out (constants go with their readers;
    Vela passes reshapes through)."""
    with loaded(tosa) as (_, block):
        operators = list(block.operators)
        compute = [i for i, op in enumerate(operators) if str(op.op) not in passed]
        producer = {tensor: i for i in compute for tensor in operators[i].outputs}
        parent = {i: i for i in compute}

        def root(i: int) -> int:
            while parent[i] != i:
                i = parent[i]
            return i

        for i in compute:
            for tensor in operators[i].inputs:
                if tensor in producer and str(block.getTensorByName(tensor).dtype) in ACCUMULATORS:
                    parent[root(i)] = root(producer[tensor])
        groups: dict[int, list[int]] = {}
        for i in compute:
            groups.setdefault(root(i), []).append(i)
        return sorted(groups.values(), key=min)


def part_of(tosa: bytes, keep: set[int], passed: tuple[str, ...] = BOOKKEEPING) -> bytes:
    """A TOSA graph of the operators `keep` (indices) alone, but the `passed` ones: their constants,
    the tensors they read from outside the part as inputs, and the tensors they hand outside (or the
    partition's outputs) as outputs."""
    import tosa_serializer as ts

    with loaded(tosa) as (_, block), tempfile.TemporaryDirectory() as out:
        operators = list(block.operators)
        kept = [operators[i] for i in sorted(keep) if str(operators[i].op) not in passed]
        constants = {op.outputs[0] for op in operators if str(op.op) == "Op.CONST"}
        produced = {t for op in kept for t in op.outputs}
        kept_ids = {id(op) for op in kept}
        read_outside = {t for op in operators if id(op) not in kept_ids for t in op.inputs} | set(block.outputs)
        graph = ts.TosaSerializer(out, targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
        names: dict[str, str] = {}
        shapes = block.shapes  # TOSA 1.0's shape operands (a SLICE's start and size): not tensors
        for name in dict.fromkeys(t for op in kept for t in op.inputs):
            if name in produced:
                continue
            if name in shapes:  # a CONST_SHAPE's, written as ExecuTorch writes it
                shape = shapes[name]
                graph.addConst([shape.rank], ts.DType.SHAPE, _shape_values(shape), name=name)
                names[name] = name
                continue
            tensor = block.getTensorByName(name)
            if name in constants:
                new = graph.addConst(list(tensor.shape), tensor.dtype, None, name=name)
                new.data = list(tensor.data)
            else:
                dtype = _NUMPY.get(str(tensor.dtype), np.int8)
                new = graph.addPlaceholder(list(tensor.shape), tensor.dtype, np.zeros(tensor.shape, dtype))
            names[name] = new.name
        for op in kept:
            outputs = []
            for name in op.outputs:
                tensor = block.getTensorByName(name)
                names[name] = graph.addIntermediate(list(tensor.shape), tensor.dtype).name
                outputs.append(names[name])
            graph.addOperator(op.op, [names[t] for t in op.inputs], outputs, _attribute(op.attributes))
        leaving = [t for t in dict.fromkeys(t for op in kept for t in op.outputs) if t in read_outside]
        written = graph.regions[0].basicBlocks[0]
        for name in leaving or list(kept[-1].outputs):
            graph.addOutputTensor(written.getTensorByName(names[name]))
        return bytes(graph.serialize())


def _shape_values(shape) -> list[int]:
    """A loaded shape constant's values (stored as little-endian int64 bytes)."""
    return np.frombuffer(bytes(shape.data), dtype="<i8").tolist()


def _attribute(loaded):
    """A loaded operator's attribute as the serializer's writer takes it (TosaConv2dAttribute ->
    TosaSerializerAttribute.Conv2dAttribute(pad, stride, ...), its fields by the writer's names)."""
    import tosa_serializer as ts

    wrapper = ts.TosaSerializerAttribute()
    writer = getattr(wrapper, type(loaded).__name__.removeprefix("Tosa"))
    fields = re.findall(r"(\w+): ", writer.__doc__.splitlines()[0])[1:]  # after `self`
    writer(*(getattr(loaded, f) for f in fields))
    return wrapper


# ---- bisection --------------------------------------------------------------------------------


def locate(
    tosa: bytes,
    refuses: Callable[[bytes], bool],
    max_tries: int = MAX_TRIES,
    crashed: bool = False,
    seed: Location | None = None,
) -> Location:
    """The units of the partition that `refuses` (Vela, with the cell's flags, on a TOSA graph:
    True when it fails) will not compile, by bisection (see the module docstring). `crashed`: Vela
    crashed on the partition, and the parts keep its reshapes (CONSTANTS). `seed`: what the search
    found in the same partition for another cell, tried first (_Search.confirmed); searched as
    ever where it does not hold for this cell's flags."""
    search = _Search(tosa, refuses, max_tries, CONSTANTS if crashed else BOOKKEEPING)
    grouped = units(tosa, search.passed)
    found = search.confirmed(grouped, seed) if seed is not None and seed.refused else None
    seeded = found is not None
    if found is None:
        search.max_tries += search.tries  # a seed that did not hold leaves the search its whole budget
        found = search.refused(grouped)
    # Units that fail only together can straddle a split where the other half failed for its own
    # reason, and the bisection never sees them together: while any found part is such a group, the
    # rest of the partition is tried without the found parts, and searched again while it fails
    # (MobileViT-XXS int8: the attention blocks' query scales, 5 found by the first pass, 6 in all).
    while not seeded and any(len(part) > 1 for part in found) and search.tries < search.max_tries:
        rest = _outside(grouped, found)
        more = search.refused(rest) if rest else []
        if not more:
            break
        found += more
    smallest = search.smallest
    return Location(
        refused=[_describe(tosa, part) for part in found],
        tries=search.tries,
        units=len(grouped),
        complete=seed.complete if seeded else search.tries < search.max_tries,
        minimal_tosa=part_of(tosa, {i for unit in smallest for i in unit}, search.passed) if smallest else None,
        compiled=search.compiled,
        seeded=seeded,
    )


def _outside(grouped: list[list[int]], parts: list[list[list[int]]]) -> list[list[int]]:
    """The partition's units that are in none of `parts` (found or seeded refused parts)."""
    taken = {min(unit) for part in parts for unit in part}
    return [unit for unit in grouped if min(unit) not in taken]


class _Search:
    """One partition's search: Vela's verdict on parts of it (a part is a list of units, a unit the
    operator indices that go together), counted, and the smallest part that failed."""

    def __init__(self, tosa: bytes, refuses: Callable[[bytes], bool], max_tries: int, passed: tuple[str, ...]):
        self.tosa, self.refuses, self.max_tries, self.passed = tosa, refuses, max_tries, passed
        self.tries = self.compiled = 0
        self.smallest: list[list[int]] | None = None

    def fails(self, part: list[list[int]]) -> bool:
        self.tries += 1
        failed = self.refuses(part_of(self.tosa, {i for unit in part for i in unit}, self.passed))
        if failed and (self.smallest is None or len(part) < len(self.smallest)):
            self.smallest = part
        self.compiled += not failed
        return failed

    def confirmed(self, grouped: list[list[int]], seed: Location) -> list[list[list[int]]] | None:
        """The seed's refused parts, if they hold here: the partition without them compiles, each
        fails, and each part of several units compiles without any one of them (what the search's
        own answer guarantees). 1 + k + (units in the k parts) Vela runs at most, where a search
        takes tens to hundreds. None if any does not hold. A seed whose search stopped at its limit
        guarantees no such minimum, so only the first two are asked of it: the same partition's
        search would stop at the same limit again (docs/performance.md measures what that saves)."""
        with loaded(self.tosa) as (_, block):
            made_by = {tensor: i for i, op in enumerate(block.operators) for tensor in op.outputs}
        unit_of = {i: unit for unit in grouped for i in unit}
        parts = []
        for refused in seed.refused:
            indices = [made_by.get(tensor) for tensor in refused.tensors]
            if None in indices or any(i not in unit_of for i in indices):
                return None  # not this partition's operators, or not its units
            units_in = {min(unit_of[i]): unit_of[i] for i in indices}
            parts.append([units_in[first] for first in sorted(units_in)])
        rest = _outside(grouped, parts)
        if rest and self.fails(rest):
            return None
        for part in parts:
            if not self.fails(part):
                return None
            if len(part) > 1 and seed.complete and any(self.fails(part[:k] + part[k + 1 :]) for k in range(len(part))):
                return None
        return parts

    def refused(self, part: list[list[int]]) -> list[list[list[int]]]:
        if self.tries >= self.max_tries or not self.fails(part):
            return []
        if len(part) == 1:
            return [part]
        middle = len(part) // 2
        found = self.refused(part[:middle]) + self.refused(part[middle:])
        # refused only together: the halves compile on their own; the fewest units that still fail
        return found or [self.together(part)]

    def together(self, part: list[list[int]]) -> list[list[int]]:
        """Units dropped from a failing part, a chunk at a time, while it still fails (Zeller's
        ddmin): what is left fails, and fails without any one of its units."""
        chunk = len(part) // 2
        while chunk >= 1 and len(part) > 1 and self.tries < self.max_tries:
            start, dropped = 0, False
            while start < len(part) and self.tries < self.max_tries:
                trial = part[:start] + part[start + chunk :]
                if trial and self.fails(trial):
                    part, dropped = trial, True
                else:
                    start += chunk
            chunk = chunk if dropped and chunk < len(part) else chunk // 2
        return part


def _describe(tosa: bytes, part: list[list[int]]) -> Refused:
    """A refused part (units of operator indices) as its operators say it: the main operator of each
    unit ('conv2d, int16 in, ...'; 'slice, int8 in + reshape, int8 in + mul, int32 in' when several
    units fail only together)."""
    with loaded(tosa) as (_, block):
        every = list(block.operators)
        operators = [every[i] for unit in part for i in unit]
        refused = Refused(
            operators=[str(op.op).removeprefix("Op.") for op in operators],
            tensors=[op.outputs[0] for op in operators],
        )
        mains = [_main(every[i] for i in unit) for unit in sorted(part, key=min)]
        refused.description = " + ".join(_operator_terms(block, op) for op in mains)
        return refused


def _main(operators):
    """A unit's operator that says what it does: not the RESCALE, CLAMP or RESHAPE around it."""
    operators = list(operators)
    return next((op for op in operators if str(op.op) not in ("Op.RESCALE", "Op.CLAMP", "Op.RESHAPE")), operators[0])


def _operator_terms(block, op) -> str:
    """'conv2d, int16 in, 1x1, stride 1, 96 channels': the operator as its shapes and types say it."""
    kind = str(op.op).removeprefix("Op.").lower().replace("depthwise_conv2d", "depthwise conv2d")
    source = block.getTensorByName(op.inputs[0]) if op.inputs else None
    parts = [kind]
    if source is not None:
        parts.append(f"{str(source.dtype).removeprefix('DType.').lower()} in")
    if "conv" in kind and len(op.inputs) > 1:
        weights = block.getTensorByName(op.inputs[1]).shape  # OHWI (conv2d) or HWCM (depthwise)
        height, width = (weights[1], weights[2]) if kind == "conv2d" else (weights[0], weights[1])
        stride = getattr(op.attributes, "stride", None)
        parts.append(f"{height}x{width}")
        if stride:
            parts.append(f"stride {stride[0]}")
        parts.append(f"{weights[0] if kind == 'conv2d' else weights[2] * weights[3]} channels")
    return ", ".join(parts)


def name_in_model(refused: Refused, sources: dict[str, dict]) -> Refused:
    """Fill in the model's nodes and modules a refused unit comes from (the lower stage's
    tosa_sources.json for this partition), and lead its description with the module."""
    nodes, modules, joins = [], [], []
    for operator, tensor in zip(refused.operators, refused.tensors):
        recorded = sources.get(tensor) or {}
        node = recorded.get("sources", [])[-1:]  # the outermost: the exported model's node
        nodes.extend(node)
        if operator in ELEMENTWISE:
            joins.extend(node)
        if recorded.get("module"):
            modules.append(recorded["module"])
    refused.nodes = list(dict.fromkeys(nodes))
    refused.joins = list(dict.fromkeys(joins))
    refused.modules = list(dict.fromkeys(modules))
    where = ", ".join(refused.modules or refused.nodes) or ", ".join(refused.tensors[:2])
    refused.description = f"{where} ({refused.description})"
    return refused
