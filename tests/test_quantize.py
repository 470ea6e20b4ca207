"""The quantize stage is keyed by TOSA profile: check that sharing is sound."""

from pathlib import Path

import pytest
import torch

from ethosweep.compile.compile_spec import ethosu_compile_spec
from ethosweep.compile.quantize import graph_digest, quantize_exported
from ethosweep.compile.zoo import load_model
from ethosweep.matrix.models import ModelSpec

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mnist_program():
    model, inputs = load_model(ModelSpec(name="mnist", file="models/mnist.py"), seed=0, base_dir=REPO)
    return torch.export.export(model, inputs), inputs


def quantized_digest(program, inputs, target, system_config, memory_mode):
    spec = ethosu_compile_spec(target, system_config, memory_mode, {})
    return graph_digest(quantize_exported(program, [inputs], "int8", spec))


def test_targets_with_the_same_tosa_profile_quantize_identically(mnist_program):
    program, inputs = mnist_program
    digests = {
        quantized_digest(program, inputs, "ethos-u55-32", "Ethos_U55_Deep_Embedded", "Sram_Only"),
        quantized_digest(program, inputs, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
        quantized_digest(program, inputs, "ethos-u65-512", "Ethos_U65_High_End", "Dedicated_Sram"),
    }
    # Neither MAC count, system config nor memory mode reach the quantizer.
    assert len(digests) == 1


def test_a16w8_quantizes_activations_to_int16(mnist_program):
    program, inputs = mnist_program
    spec = ethosu_compile_spec("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only", {})
    quantized = quantize_exported(program, [inputs], "a16w8", spec)
    dtypes = {
        n.args[-1]
        for n in quantized.graph_module.graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target)
    }
    assert torch.int16 in dtypes
