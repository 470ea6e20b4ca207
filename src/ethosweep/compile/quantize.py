"""Stage 2, quantize: PT2E post-training quantization with EthosUQuantizer.

Keyed by (model, scheme, TOSA profile), not by cell: EthosUQuantizer sees the
compile spec only through its TOSA specification, which is the same for
Ethos-U55 and Ethos-U65 (the "u55" profile) and different for Ethos-U85
("u85"). Every cell with the same profile shares one quantized program.
tests/test_quantize.py checks that claim on a real model.

And where the two profiles' quantizations are the same, they are made once. The
profile reaches the quantizer only through its transform-for-annotation passes
(decompositions some of which depend on the TOSA specification); annotating,
calibrating and converting do not read it. So the u85 job runs the quantizer up to
the graph it annotates and, if that graph (nodes, value shapes and dtypes, the
tensors it reads) and the calibration are the u55 job's, takes the u55 program
instead of calibrating and converting again (about half the job's time; on every
model of the default matrix and the mobile_classifiers preset the programs were
equal anyway, apart from ids). A model whose passes differ per profile quantizes
twice, as before.
"""

from __future__ import annotations

import hashlib
import io
import logging
import operator
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ethosweep.compile.artifacts import Calibration, calibration_set, load_tensors
from ethosweep.compile.compile_spec import profile_compile_spec
from ethosweep.matrix import targets as tg
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.io import atomic_write_bytes, read_json, write_json
from ethosweep.runtime.outcome import failure_of
from ethosweep.runtime.provenance import tool_versions

log = logging.getLogger(__name__)

SCHEMES = ("int8", "a16w8")


def quantization_config(scheme: str):
    from executorch.backends.arm.quantizer import (
        get_symmetric_a16w8_quantization_config,
        get_symmetric_quantization_config,
    )

    if scheme == "int8":
        return get_symmetric_quantization_config(is_per_channel=True)
    if scheme == "a16w8":
        return get_symmetric_a16w8_quantization_config(is_per_channel=True)
    raise ValueError(f"unknown quantization scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")


class SameQuantization(Exception):
    """The quantizer annotates the graph another profile's quantization annotated: its program is this one."""


def quantize_exported(exported, calibration: list[tuple], scheme: str, compile_spec, on_annotation=None):
    """prepare_pt2e -> calibrate -> convert_pt2e -> export: the quantized program. `on_annotation`
    is called with annotation_digest() of the graph the quantizer annotates (it may raise to stop)."""
    from executorch.backends.arm.quantizer import EthosUQuantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = EthosUQuantizer(compile_spec)
    quantizer.set_global(quantization_config(scheme))
    if on_annotation is not None:
        transform = quantizer.transform_for_annotation  # prepare_pt2e calls it, then annotates

        def transform_and_report(model):
            model = transform(model)
            on_annotation(annotation_digest(model))
            return model

        quantizer.transform_for_annotation = transform_and_report
    # torch 2.13: .module() adds a _guards_fn call_module that some Arm quantizer
    # passes reject ("call_module is not supported"); the guards are not needed here.
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
    calibrate(prepared, calibration)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, calibration[0])


@dataclass(frozen=True)
class OtherQuantization:
    """The other profile's quantized program and record (the rule's `same_as_*` items)."""

    prefix: ClassVar[str] = "same_as_"
    quantized: str | None = None
    meta: str | None = None


def quantize_model(
    program: str,
    inputs: str,
    quant: str,
    tosa_profile: str,
    quantized: str,
    meta: str,
    calibration: Calibration = Calibration(),
    same_as: OtherQuantization = OtherQuantization(),
) -> dict:
    """Quantize the exported program of one model for one scheme and TOSA profile; with another
    profile's program and record (`same_as_*`), take that program where it is this one's."""
    scheme, profile = quant, tosa_profile  # the workflow's names (runtime.binding)
    exported = torch.export.load(program)
    example_inputs = load_tensors(inputs)
    samples, calibrated_on = calibration_set(
        example_inputs, calibration.dataset, calibration.calibration_samples, calibration.seed
    )
    other = _comparable_record(same_as.meta, scheme, calibrated_on, len(samples))
    annotated = []

    def on_annotation(digest: str) -> None:
        annotated.append(digest)
        if other is not None and other.get("annotated_sha256") == digest:
            raise SameQuantization

    try:
        with running("the PT2E quantizer", f"quantizing ({scheme}, TOSA profile {profile}) on {calibrated_on}"):
            quantized_program = quantize_exported(
                exported, samples, scheme, profile_compile_spec(profile), on_annotation
            )
    except SameQuantization:
        return _same_as(other, same_as.quantized, profile, quantized, meta)
    except Exception as error:
        raise StageError(
            f"quantization ({scheme}, TOSA profile {profile}) failed: {type(error).__name__}: {error}"
        ) from error

    buffer = io.BytesIO()
    torch.export.save(quantized_program, buffer)
    atomic_write_bytes(quantized, buffer.getvalue())

    record = {
        "scheme": scheme,
        "tosa_profile": profile,
        "tosa_spec": tg.tosa_spec(profile),
        "calibration_samples": len(samples),
        "calibrated_on": calibrated_on,
        "graph_sha256": graph_digest(quantized_program),
        "annotated_sha256": annotated[0] if annotated else None,
        "quant_ops": dict(sorted(_quant_op_counts(quantized_program).items())),
        "versions": tool_versions(),
    }
    write_json(meta, record)
    log.info("quantized (%s, %s): graph %s", scheme, profile, record["graph_sha256"][:12])
    return record


def calibrate(prepared, calibration: list[tuple]) -> None:
    """Run the calibration inputs through the prepared model, each observer recording its range.

    A min/max observer of a constant (a weight's, read by get_attr) sees the same tensor on every
    input, and its minimum and maximum after one look are exactly what they are after any number:
    so it looks once, on the first input. Otherwise every weight is re-read once per input
    (ResNet18: 11M weights 100 times, 2.8 s of a 7 s calibration). Observers whose state depends on
    how often they look (histograms, moving averages) look every time."""
    if not calibration:
        return
    with torch.no_grad():
        prepared(*calibration[0])
        looked_once = constant_min_max_observers(prepared)
        for observer in looked_once:
            observer.forward = _unchanged
        try:
            for sample in calibration[1:]:
                prepared(*sample)
        finally:
            for observer in looked_once:
                del observer.forward  # the class's forward again, for whatever runs it next


def constant_min_max_observers(prepared) -> list:
    """The prepared model's min/max observers (exactly those classes: a subclass may count its
    looks) that only ever see constants: every node calling one (a shared quantization spec calls
    one observer from several) reads only get_attr nodes."""
    from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver

    constant = {}
    for node in prepared.graph.nodes:
        if node.op == "call_module":
            reads_constants = bool(node.all_input_nodes) and all(n.op == "get_attr" for n in node.all_input_nodes)
            constant[node.target] = constant.get(node.target, True) and reads_constants
    modules = [prepared.get_submodule(target) for target, only in constant.items() if only]
    return [module for module in modules if type(module) in (MinMaxObserver, PerChannelMinMaxObserver)]


def _unchanged(x):
    return x  # what an observer's forward returns


def _comparable_record(path: str | None, scheme: str, calibrated_on: str, samples: int) -> dict | None:
    """Another profile's record, if it is a quantization this one could be (not a failure, the same
    scheme and calibration)."""
    if not path or failure_of(path) is not None:
        return None
    record = read_json(path)
    same = (record.get("scheme"), record.get("calibrated_on"), record.get("calibration_samples"))
    return record if same == (scheme, calibrated_on, samples) else None


def _same_as(other: dict, other_program: str, profile: str, quantized: str, meta: str) -> dict:
    """This profile's quantization is `other`'s: its program, recorded as this profile's."""
    atomic_write_bytes(quantized, Path(other_program).read_bytes())
    record = {
        **other,
        "tosa_profile": profile,
        "tosa_spec": tg.tosa_spec(profile),
        "same_as": f"the {other['tosa_profile']} profile's quantization (the quantizer annotated the same graph)",
        "versions": tool_versions(),
    }
    write_json(meta, record)
    log.info("quantized (%s, %s): the %s profile's program", record["scheme"], profile, other["tosa_profile"])
    return record


def annotation_digest(graph_module) -> str:
    """A digest of the graph the quantizer annotates: its nodes, each value's shape and dtype, and
    the tensors it reads. Equal digests, equal annotations (the annotator reads nothing else)."""
    digest = hashlib.sha256(str(graph_module.graph).encode())
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            digest.update(f"{node.name}:{tuple(value.shape)}:{value.dtype}".encode())
        if node.op == "get_attr":
            tensor = operator.attrgetter(node.target)(graph_module)
            if isinstance(tensor, torch.Tensor):
                digest.update(f"{node.target}:{tensor.dtype}".encode())
                digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's data as bytes (any dtype: bfloat16 has no numpy counterpart to go through)."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def graph_digest(exported) -> str:
    """A digest of the quantized graph and its weights: equal digests mean equal programs."""
    digest = hashlib.sha256(str(exported.graph_module.graph).encode())
    for name, tensor in sorted(exported.state_dict.items()):
        digest.update(name.encode())
        digest.update(_tensor_bytes(tensor))
    for name, tensor in sorted(exported.constants.items()):
        if isinstance(tensor, torch.Tensor):
            digest.update(name.encode())
            digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def _quant_op_counts(exported) -> Counter:
    return Counter(
        str(n.target).split(".")[1] if "." in str(n.target) else str(n.target)
        for n in exported.graph_module.graph.nodes
        if n.op == "call_function" and "quantize" in str(n.target)
    )
