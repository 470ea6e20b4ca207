"""The verify stage on a trained model: it passes good quantization and catches a broken one."""

import io
from pathlib import Path

import pytest
import torch

from ethosweep.datasets import load_splits
from ethosweep.export import export_model, load_tensors
from ethosweep.compile_spec import profile_compile_spec
from ethosweep.lower import lower_to_tosa
from ethosweep.quantize import quantize_exported
from ethosweep.train import train_model
from ethosweep.verify import verify_numerics

REPO = Path(__file__).resolve().parents[1]
MODEL = {"name": "mnist_digits", "file": "models/mnist.py"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("numerics")
    train_model(model=MODEL, seed=0, dataset="digits", train={"epochs": 12, "lr": 0.002, "batch_size": 64},
                weights=str(d / "weights.pt"), meta=str(d / "train.json"), base_dir=str(REPO))
    export_model(model=MODEL, seed=0, program=str(d / "program.pt2"), inputs=str(d / "inputs.pt"),
                 reference=str(d / "reference.pt"), meta=str(d / "export.json"), weights=str(d / "weights.pt"),
                 base_dir=str(REPO))
    return d


def quantize_and_verify(d: Path, name: str, calibration: list[tuple]) -> dict:
    quantized = quantize_exported(torch.export.load(d / "program.pt2"), calibration, "int8", profile_compile_spec("u55"))
    torch.export.save(quantized, d / f"{name}.pt2")
    lowered = d / f"{name}_lowered"
    lower_to_tosa(quantized=str(d / f"{name}.pt2"), profile="u55", template=str(lowered / "template.pte"),
                  tosa_dir=str(lowered / "tosa"), edge=str(lowered / "edge.pt2"),
                  delegation=str(lowered / "delegation.json"), meta=str(lowered / "lower.json"))
    return verify_numerics(program=str(d / "program.pt2"), quantized=str(d / f"{name}.pt2"), inputs=str(d / "inputs.pt"),
                           edge=str(lowered / "edge.pt2"), lower_meta=str(lowered / "lower.json"),
                           report=str(d / f"{name}.json"), bundle_io=str(d / f"{name}_io.pt"),
                           dataset="digits", evaluation_samples=300)


def test_calibrated_on_real_data_the_npu_matches_float(exported):
    calibration = load_splits("digits", load_tensors(exported / "inputs.pt"), 0).calibration(100)
    record = quantize_and_verify(exported, "good", calibration)
    metrics = record["metrics"]
    assert record["flags"] == []
    assert metrics["top1_float"] >= 0.95 and metrics["top1_npu"] >= 0.95
    assert metrics["agreement_npu_vs_float"] >= 0.99 and metrics["max_error_steps"] <= 1
    assert record["seconds"]["total"] < 60  # seconds, not minutes (benchmarks/verify.py times it)


def test_a_broken_quantization_is_caught(exported):
    """Calibrated on all-zero inputs, activations ranges are wrong: the check must fail."""
    record = quantize_and_verify(exported, "broken", [(torch.zeros(1, 1, 28, 28),)] * 10)
    metrics = record["metrics"]
    assert metrics["top1_npu"] < metrics["top1_float"] - 0.2
    assert any(flag.startswith("top-1 agreement with float") for flag in record["flags"])
    # The layer where accuracy is lost is named: its SNR against float drops the most. Calibrated
    # on zeros, the input's own quantization range is wrong, so that is where it goes.
    assert record["worst_layers"][0]["layer"] == "x (input quantization)"
    assert record["worst_layers"][0]["snr_drop_db"] > 10
