"""Stage 2, quantize: PT2E post-training quantization with EthosUQuantizer.

Keyed by (model, scheme, TOSA profile), not by cell: EthosUQuantizer sees the
compile spec only through its TOSA specification, which is the same for
Ethos-U55 and Ethos-U65 (the "u55" profile) and different for Ethos-U85
("u85"). Every cell with the same profile shares one quantized program.
tests/test_quantize.py checks that claim on a real model.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections import Counter

import torch

from ethosweep.compile.artifacts import calibration_set, load_tensors
from ethosweep.compile.compile_spec import profile_compile_spec
from ethosweep.matrix import targets as tg
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.io import atomic_write_bytes, write_json
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


def quantize_exported(exported, calibration: list[tuple], scheme: str, compile_spec):
    """prepare_pt2e -> calibrate -> convert_pt2e -> export: the quantized program."""
    from executorch.backends.arm.quantizer import EthosUQuantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = EthosUQuantizer(compile_spec)
    quantizer.set_global(quantization_config(scheme))
    # torch 2.13: .module() adds a _guards_fn call_module that some Arm quantizer
    # passes reject ("call_module is not supported"); the guards are not needed here.
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(*sample)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, calibration[0])


def quantize_model(
    program: str,
    inputs: str,
    scheme: str,
    profile: str,
    quantized: str,
    meta: str,
    dataset=None,
    calibration_samples: int = 100,
    seed: int = 0,
) -> dict:
    """Quantize the exported program of one model for one scheme and TOSA profile."""
    exported = torch.export.load(program)
    example_inputs = load_tensors(inputs)
    calibration, calibrated_on = calibration_set(example_inputs, dataset, calibration_samples, seed)
    try:
        with running("the PT2E quantizer", f"quantizing ({scheme}, TOSA profile {profile}) on {calibrated_on}"):
            quantized_program = quantize_exported(exported, calibration, scheme, profile_compile_spec(profile))
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
        "calibration_samples": len(calibration),
        "calibrated_on": calibrated_on,
        "graph_sha256": graph_digest(quantized_program),
        "quant_ops": dict(sorted(_quant_op_counts(quantized_program).items())),
        "versions": tool_versions(),
    }
    write_json(meta, record)
    log.info("quantized (%s, %s): graph %s", scheme, profile, record["graph_sha256"][:12])
    return record


def graph_digest(exported) -> str:
    """A digest of the quantized graph and its weights: equal digests mean equal programs."""
    digest = hashlib.sha256(str(exported.graph_module.graph).encode())
    for name, tensor in sorted(exported.state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    for name, tensor in sorted(exported.constants.items()):
        if isinstance(tensor, torch.Tensor):
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def _quant_op_counts(exported) -> Counter:
    return Counter(
        str(n.target).split(".")[1] if "." in str(n.target) else str(n.target)
        for n in exported.graph_module.graph.nodes
        if n.op == "call_function" and "quantize" in str(n.target)
    )
