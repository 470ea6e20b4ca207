"""Stage: a BundleIO program (.bpte) per cell, so that firmware can check itself.

The cell's .pte with test cases from the verify stage: real evaluation inputs and the
quantized model's outputs for them. ExecuTorch's arm_executor_runner, built with BundleIO,
runs them and prints `Test_result: PASS` or `FAIL` (the default FVP input is otherwise a
tensor of ones).
"""

from __future__ import annotations

import logging

import torch

from ethosweep.runtime.integrity import verify
from ethosweep.runtime.io import atomic_write_bytes, read_json

log = logging.getLogger(__name__)


def bundle_program(pte: str, meta: str, bundle_io: str, bpte: str, shared_bundle_io: str | None = None) -> dict:
    """`shared_bundle_io`: the other TOSA profile's test cases, where the profile's verification is
    that one's (its bundle_io then says so)."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    lowered = read_json(meta)
    verify(pte, lowered["pte_bytes"], lowered["pte_sha256"], "the vela stage")
    data = torch.load(bundle_io, weights_only=True)
    if "same_as" in data:
        data = torch.load(shared_bundle_io, weights_only=True)
    cases = [MethodTestCase(inputs=list(x), expected_outputs=list(y)) for x, y in zip(data["inputs"], data["expected"])]
    bundled = BundledProgram(None, [MethodTestSuite(method_name="forward", test_cases=cases)], pte_file_path=pte)
    atomic_write_bytes(bpte, serialize_from_bundled_program_to_flatbuffer(bundled))
    log.info("bundled %d test cases with the .pte", len(cases))
    return {"test_cases": len(cases)}
