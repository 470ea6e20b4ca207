"""The NPU path on the TOSA reference model, in a fork, and what reproduces a crash of it.

The lowered graph runs in PyTorch with each delegated partition executed by the TOSA reference
model (tosa-tools' `tosa_reference_model`, the functional specification of what the NPU
computes). The reference model is native code: a crash in it would end the verify job's own
process, and with it every run's summary. So the NPU path runs in a forked child
(ethosweep.runtime.isolation), tried once more in a fresh one if it crashes; a crash that happens
again is the model's: its verification fails, recorded (its cells stay compiled, their numerics
`unverified`, saying why), with a reproducer: the partition's TOSA, the inputs the NPU path gave it
on that sample, and the command that runs them on the reference model outside the sweep.
"""

from __future__ import annotations

import operator
import shlex
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.utils._pytree as pytree

from ethosweep.compile.tosa_graph import UnreadableTosa, loaded, quiet_c_output
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import Fault, StageError
from ethosweep.runtime.isolation import ToolCrashed, call_in_child

TOOL = "the TOSA reference model"


def run_tosa(tosa: bytes, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    import tosa_reference_model as reference

    arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    with quiet_c_output():  # the library prints a version notice to stdout on every run
        outputs, status = reference.run(tosa, arrays, verbosity="NONE", initialize_variable_tensor_from_numpy=True)
    if status != reference.GraphStatus.TOSA_VALID:
        raise StageError(f"the TOSA reference model rejected the partition: {status}")
    return tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in outputs)


def input_names(tosa: bytes) -> list[str]:
    """The names of a TOSA graph's inputs, in order: the partition's placeholders it reads (a partition
    whose results are all constants reads none, though its delegate call still passes its inputs)."""
    with loaded(tosa) as (_, block):
        return list(block.inputs)


def read_inputs(tosa: bytes, passed: list[str]) -> list[str]:
    """input_names, or all that the call passes where the flatbuffer cannot be read: the reference
    model then runs on it and says what it makes of it (a damaged partition crashes it: a fault
    located in its own process, not a bug of ethosweep's)."""
    try:
        return input_names(tosa)
    except UnreadableTosa:
        return passed


class _Reached(Exception):
    """NpuInterpreter reached the delegate call it was asked to stop at: its inputs."""

    def __init__(self, inputs: list[torch.Tensor]):
        super().__init__("reached")
        self.inputs = inputs


class NpuInterpreter(torch.fx.Interpreter):
    """Runs a lowered graph with each delegate executed by the TOSA reference model. `sample` names
    the input in its activity marks (what a crash's message says); `stop_at`: the partition whose
    inputs to capture instead of running it (raises _Reached)."""

    def __init__(self, module, sample: int | None = None, stop_at: int | None = None):
        super().__init__(module)
        self.sample = sample
        self.stop_at = stop_at
        self.partitions = {
            id(getattr(module, n.target)): i
            for i, n in enumerate(
                n for n in module.graph.nodes if n.op == "get_attr" and n.target.startswith("lowered_module")
            )
        }
        self.delegate_calls: list[tuple[bytes, list[torch.Tensor]]] = []  # (TOSA, inputs) per call, in order
        self._tosa_inputs: dict[int, list[str]] = {}  # a partition's TOSA input names, by its delegate

    def run_node(self, n):
        self._node = n  # the node being run: call_function reads its arguments' dim orders
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        if target is torch.ops.higher_order.executorch_call_delegate:
            lowered, *inputs = args
            # in the dim order the program holds them (a channels-last export hands the NPU NHWC)
            inputs = [in_dim_order(t, node) for t, node in zip(inputs, self._node.args[1:])]
            partition = self.partitions.get(id(lowered), "?")
            on = f" on sample {self.sample}" if self.sample is not None else ""
            if partition == self.stop_at:  # as the call passes them: its TOSA may be what crashes
                raise _Reached([t.clone() for t in inputs])
            # reading the partition's TOSA is the tools' work too: a damaged one crashes there first
            with running(TOOL, f"running partition {partition}{on}"):
                inputs = self._read_by_tosa(lowered, inputs)
            self.delegate_calls.append((lowered.processed_bytes, [t.clone() for t in inputs]))
            with running(TOOL, f"running partition {partition}{on}"):
                outputs = run_tosa(lowered.processed_bytes, inputs)
            check_boundary(self._node, partition, outputs)
            return tuple(from_dim_order(t, value) for t, value in zip(outputs, _values(self._node)))
        return super().call_function(target, args, kwargs)

    def _read_by_tosa(self, lowered, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The delegate call's inputs the partition's TOSA graph reads, in its order (by the partition's
        placeholder names): a partition whose results are all constants (a full_like of its input)
        reads none of what the call passes it."""
        names = list(lowered.original_module.graph_signature.user_inputs)
        wanted = self._tosa_inputs.get(id(lowered))
        if wanted is None:
            wanted = self._tosa_inputs[id(lowered)] = read_inputs(lowered.processed_bytes, names)
        return read_by(wanted, names, inputs)


def read_by(wanted: list[str], names: list[str], inputs: list) -> list:
    """Of the `inputs` a delegate call passes (its placeholders `names`), those its TOSA reads (`wanted`)."""
    if len(names) != len(inputs) or wanted == names or not set(wanted) <= set(names):
        return inputs
    return [inputs[names.index(name)] for name in wanted]


class BoundaryMismatch(StageError):
    """The lowered program takes a partition's output in another dtype than its TOSA gives."""

    def __str__(self) -> str:
        return self.message  # without the node torch.fx appends to the error's args on its way out

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def check_boundary(node, partition, outputs: tuple[torch.Tensor, ...]) -> None:
    """Each output of a delegate call in the dtype the lowered program expects of it. ExecuTorch's
    lowering can leave a CPU quantize after an NPU output it did not dequantize (a16w8, an output
    taken apart by a split: the graph says float32 where the partition's TOSA gives int16); the CPU
    part then cannot use it as lowered, and that, not a tolerance, is what the cell's numerics
    must say."""
    users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    for index, (tensor, value) in enumerate(zip(outputs, _values(node))):
        # float expected, an integer given (an integer width the TOSA profile lacks, int64 as int32, is not this)
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and not tensor.dtype.is_floating_point:
            taker = users.get(index)
            into = f" ({taker.name}, into {', '.join(u.name for u in taker.users)})" if taker is not None else ""
            raise BoundaryMismatch(
                f"the lowered program takes output {index} of NPU partition {partition}{into} as "
                f"{str(value.dtype).removeprefix('torch.')}, but the partition gives "
                f"{str(tensor.dtype).removeprefix('torch.')}: ExecuTorch's lowering left it without a "
                "dequantize at the NPU-CPU boundary, so the program's CPU part cannot run on what the NPU gives"
            )


def _dim_order(value) -> tuple[int, ...] | None:
    """A tensor value's dim order where it is not the identity (channels-last: (0, 2, 3, 1)), else None."""
    order = tuple(value.dim_order()) if hasattr(value, "dim_order") else None
    return order if order and order != tuple(range(len(order))) else None


def in_dim_order(tensor: torch.Tensor, node) -> torch.Tensor:
    """`tensor` laid out as the program holds its argument `node` (the TOSA graph's input)."""
    order = _dim_order(node.meta.get("val")) if hasattr(node, "meta") else None
    return tensor.permute(order).contiguous() if order else tensor


def from_dim_order(tensor: torch.Tensor, value) -> torch.Tensor:
    """A delegate's output as the TOSA graph gives it, back in the logical (NCHW) order of `value`."""
    order = _dim_order(value)
    if not order:
        return tensor
    inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
    return tensor.permute(inverse)


def _values(node) -> list:
    value = node.meta.get("val")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def flat(outputs) -> list[torch.Tensor]:
    return [t.detach().float() for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def npu_outputs(npu_module, samples: list[tuple], repro: Path, first: int = 0) -> list[list[torch.Tensor]]:
    """The NPU path's outputs on each sample (flattened tensors; `first`: the first one's index in the
    evaluation set), run in a fork (see the module docstring); a crash that happens again raises the
    recorded failure, with its reproducer in `repro`."""
    if not samples:
        return []
    try:
        return call_in_child(_npu_outputs, npu_module, samples, first, what=TOOL)
    except ToolCrashed as crash:
        raise crash_failure(crash, npu_module, samples, first, repro) from crash


def _npu_outputs(npu_module, samples: list[tuple], first: int) -> list[list[torch.Tensor]]:
    with torch.no_grad():
        return [
            flat(NpuInterpreter(npu_module, sample=i).run(*sample)) for i, sample in enumerate(samples, start=first)
        ]


def in_fork(function, *args):
    """`function(*args)` (something that runs the reference model: the layer-by-layer comparison)
    in a fork; a crash or an error comes back as a StageError naming it."""
    return call_in_child(function, *args, what=TOOL)


# ---- when it crashes ---------------------------------------------------------------------------


def crash_failure(crash: ToolCrashed, npu_module, samples: list[tuple], first: int, repro: Path) -> StageError:
    """The verification's failure for a crash of the reference model: SIGKILL is the machine's
    (memory: retried); any other crash, once it happened again, is the model's, with a reproducer."""
    if crash.fault is not Fault.CRASH or not crash.reproduced:
        return crash
    partition, sample = _where(crash.doing)
    reproducer = ""
    if partition is not None and sample is not None:
        try:
            reproducer = write_reproducer(repro, npu_module, samples[sample - first], partition, str(crash))
        except Exception as error:  # noqa: BLE001 - the crash is the failure; the reproducer is a help
            reproducer = f"(no reproducer: {type(error).__name__}: {error})"
    failure = StageError(f"{crash}, twice in fresh processes", Fault.CRASH)
    failure.reproduced = True
    failure.reproducer = reproducer
    return failure


def _where(doing: tuple | None) -> tuple[int | None, int | None]:
    """(partition, sample) from the mark 'running partition 1 on sample 3'."""
    import re

    found = re.search(r"partition (\d+) on sample (\d+)", (doing or ("", ""))[1] or "")
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)


def write_reproducer(folder: Path, npu_module, sample: tuple, partition: int, reason: str) -> str:
    """The partition's TOSA, the inputs the NPU path gives it on `sample` (the partitions before it
    run on the reference model in a fork: they did not crash), and a script that runs them."""
    inputs = call_in_child(_inputs_of, npu_module, sample, partition, what="capturing the crashing partition's inputs")
    lowered = next(
        getattr(npu_module, n.target)
        for i, n in enumerate(
            n for n in npu_module.graph.nodes if n.op == "get_attr" and n.target.startswith("lowered_module")
        )
        if i == partition
    )
    tosa = lowered.processed_bytes
    names = list(lowered.original_module.graph_signature.user_inputs)
    try:  # in a child: reading a damaged TOSA may be the very crash
        wanted = call_in_child(input_names, tosa, what="reading the partition's TOSA", retry_crash=False)
    except Exception:  # noqa: BLE001 - unreadable: every input the call passes, as the reference model got them
        wanted = names
    inputs = read_by(wanted, names, inputs)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / f"partition_{partition}.tosa").write_bytes(tosa)
    names = []
    for index, tensor in enumerate(inputs):
        names.append(f"input_{index}.npy")
        np.save(folder / names[-1], np.ascontiguousarray(tensor.detach().numpy()))
    script = (
        "import numpy as np, tosa_reference_model as r\n"
        f"tosa = open('partition_{partition}.tosa', 'rb').read()\n"
        f"inputs = [np.load(n) for n in {names!r}]\n"
        "outputs, status = r.run(tosa, inputs, verbosity='NONE', initialize_variable_tensor_from_numpy=True)\n"
        "print(status)\n"
    )
    (folder / "run.py").write_text(script)
    (folder / "README.txt").write_text(
        f"The TOSA reference model crashed on this partition: {reason}\n\n"
        "Reproduce it outside ethosweep, from the folder the sweep ran in:\n\n"
        f"    cd {shlex.quote(str(folder))} && uv run python run.py\n\n"
        f"Files: partition_{partition}.tosa (the partition's TOSA), {', '.join(names)} (the inputs the NPU path "
        "gave it), run.py (runs them with tosa-tools' tosa_reference_model).\n"
        "Report it to the TOSA tools' maintainers: https://gitlab.arm.com/tosa/tosa-reference-model/-/issues\n"
    )
    return f"{folder}/"


def _inputs_of(npu_module, sample: tuple, partition: int) -> list[torch.Tensor]:
    try:
        with torch.no_grad():
            NpuInterpreter(npu_module, stop_at=partition).run(*sample)
    except _Reached as reached:
        return reached.inputs
    raise StageError(f"partition {partition} was not reached")
