"""A TOSA flatbuffer read with tosa-tools' serializer, and tosa-tools' C++ notices kept quiet."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from ethosweep.runtime.errors import StageError


@contextlib.contextmanager
def quiet_c_output():
    """tosa-tools print notices to stdout from C++: keep them out of the job's log."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class UnreadableTosa(StageError):
    """tosa_serializer could not parse a TOSA flatbuffer (damaged, truncated): the tool's failure on
    this input, not a bug of ethosweep's."""


@contextlib.contextmanager
def loaded(tosa: bytes):
    """(serializer, its first basic block) of a TOSA flatbuffer. The serializer's path prefix is
    where it would write tensor data files: a folder of our own, gone afterwards."""
    import tosa_serializer as ts

    with tempfile.TemporaryDirectory(prefix="ethosweep-tosa-") as tmp, quiet_c_output():
        path = os.path.join(tmp, "partition.tosa")
        with open(path, "wb") as f:
            f.write(tosa)
        graph = ts.TosaSerializer(tmp)
        if not graph.loadTosaFlatbuffer(path):
            raise UnreadableTosa("tosa_serializer could not read the partition's TOSA")
        yield graph, graph.regions[0].basicBlocks[0]


def output_dtypes(tosa: bytes) -> list[str]:
    """The dtypes of a TOSA graph's outputs, in order ('INT16', 'FP32', ...)."""
    with loaded(tosa) as (_, block):
        return [str(block.tensors[name].dtype).removeprefix("DType.") for name in block.outputs]
