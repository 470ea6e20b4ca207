"""The quantize stage is keyed by TOSA profile: check that sharing is sound, within a profile and,
where the quantizer annotates the same graph, between profiles."""

from pathlib import Path

import pytest
import torch

from ethosweep.compile.compile_spec import ethosu_compile_spec
from ethosweep.compile.quantize import graph_digest, quantize_exported
from ethosweep.matrix.models import ModelSpec
from ethosweep.zoo.models import load_model

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


@pytest.mark.parametrize("scheme", ["int8", "a16w8"])
def test_a_weights_observer_looks_once_and_the_program_is_as_if_it_looked_at_every_input(
    mnist_program, monkeypatch, scheme
):
    from torchao.quantization.pt2e.observer import PerChannelMinMaxObserver

    from ethosweep.compile import quantize

    program, inputs = mnist_program
    calibration = [inputs, *[(torch.rand_like(inputs[0]) * scale,) for scale in (0.5, 1.0, 2.0)]]
    spec = ethosu_compile_spec("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", {})
    looks = []
    forward = PerChannelMinMaxObserver.forward
    monkeypatch.setattr(PerChannelMinMaxObserver, "forward", lambda self, x: looks.append(self) or forward(self, x))

    once = quantize_exported(program, calibration, scheme, spec)
    weight_observers = len(looks)

    def every_observer_every_input(prepared, calibration):
        with torch.no_grad():
            for sample in calibration:
                prepared(*sample)

    monkeypatch.setattr(quantize, "calibrate", every_observer_every_input)
    looks.clear()
    every_time = quantize_exported(program, calibration, scheme, spec)

    assert weight_observers == 4  # mnist's two convolutions and two linear layers, once each
    assert len(looks) == weight_observers * len(calibration)
    # the same program: graph (with every scale and zero point), weights and constants
    assert graph_digest(once) == graph_digest(every_time)


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


def test_the_u85_profile_takes_the_u55_quantization_where_the_quantizer_annotates_the_same_graph(tmp_path):
    import shutil

    from ethosweep.runtime.io import read_json, write_json
    from ethosweep.runtime.outcome import write_failure
    from ethosweep.verify.chain import export, quantize

    export(tmp_path, {"name": "mnist", "file": "models/mnist.py"})
    quantize(tmp_path, "u55", profile="u55")
    quantize(tmp_path, "u85", profile="u85", same_as="u55")
    u55, u85 = read_json(tmp_path / "u55.quantize.json"), read_json(tmp_path / "u85.quantize.json")
    assert u85["same_as"].startswith("the u55 profile's quantization")
    assert (u85["tosa_profile"], u85["tosa_spec"]) == ("u85", "TOSA-1.0+INT+int16+int4+cf")
    assert (tmp_path / "u85.pt2").read_bytes() == (tmp_path / "u55.pt2").read_bytes()

    # what makes it sound: quantized on its own, the u85 program is the same program
    quantize(tmp_path, "alone", profile="u85")
    alone = read_json(tmp_path / "alone.quantize.json")
    assert "same_as" not in alone
    assert (alone["annotated_sha256"], alone["graph_sha256"]) == (u55["annotated_sha256"], u55["graph_sha256"])

    # another annotated graph, or a failed u55 quantization: the u85 profile quantizes on its own
    shutil.copy(tmp_path / "u55.pt2", tmp_path / "other.pt2")
    write_json(tmp_path / "other.quantize.json", dict(u55, annotated_sha256="0" * 64))
    failed = [tmp_path / "failed.pt2", tmp_path / "failed.quantize.json"]
    write_failure({"stage": "quantize", "reason": "broken"}, failed)
    for other in ("other", "failed"):
        quantize(tmp_path, f"after_{other}", profile="u85", same_as=other)
        record = read_json(tmp_path / f"after_{other}.quantize.json")
        assert "same_as" not in record and record["graph_sha256"] == u55["graph_sha256"], other
