"""The verify stage's verdicts on models that reproduce each case: ok, inconclusive (and why),
flagged (and where).

- the MNIST CNN trained on digits: ok, with its accuracy;
- the same model calibrated on zeros: accuracy lost at the input's quantization, flagged there;
- the same model with a corrupted convolution weight in its TOSA: flagged at that layer;
- a two-input regression model: never judged by top-1, never flagged;
- a random-weight classifier over 1000 classes: logits too flat, inconclusive.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ethosweep.compile.artifacts import load_edge, load_tensors
from ethosweep.compile.compile_spec import profile_compile_spec
from ethosweep.compile.quantize import quantize_exported
from ethosweep.verify import chain
from ethosweep.verify.layers import is_exact
from ethosweep.verify.tolerances import Thresholds
from ethosweep.verify.verdicts import PASSED, Evidence, judge, random_samples_needed
from ethosweep.zoo.datasets import load_splits
from tosa_edit import negate_first_conv2d_weights, replace_partition_tosa

REPO = Path(__file__).resolve().parents[1]
MODEL = {"name": "mnist_digits", "file": "models/mnist.py"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("numerics")
    weights = chain.train(d, MODEL, "digits", {"epochs": 12, "lr": 0.002, "batch_size": 64})
    chain.export(d, MODEL, weights=weights)
    return d


lower, verify = chain.lower, chain.verify


def quantize_lower_verify(d: Path, name: str, calibration: list[tuple]) -> dict:
    quantized = quantize_exported(
        torch.export.load(d / "program.pt2"), calibration, "int8", profile_compile_spec("u55")
    )
    torch.export.save(quantized, d / f"{name}.pt2")
    return verify(d, name, lower(d, name), dataset="digits", evaluation_samples=500)


def test_calibrated_on_real_data_the_npu_matches_float(exported):
    calibration = load_splits("digits", load_tensors(exported / "inputs.pt"), 0).calibration(100)
    record = quantize_lower_verify(exported, "good", calibration)
    metrics = record["metrics"]
    assert (record["verdict"], record["classifier_evidence"]) == ("identical", "labelled data")
    assert record["quantization"]["verdict"] == "ok"
    assert metrics["top1_float"] >= 0.95 and metrics["top1_npu"] >= 0.95
    assert metrics["agreement_decidable"] >= 0.99 and metrics["decidable_samples"] >= 500 * 0.9
    assert metrics["max_error_steps"] <= 1
    assert record["seconds"]["total"] < 60  # seconds, not minutes (perf/verify.py times it)


def test_a_broken_quantization_is_flagged_at_the_input_quantization(exported):
    """Calibrated on all-zero inputs, activation ranges are wrong: accuracy is lost, at the input."""
    record = quantize_lower_verify(exported, "broken", [(torch.zeros(1, 1, 28, 28),)] * 10)
    metrics = record["metrics"]
    assert metrics["top1_npu"] < metrics["top1_float"] - 0.2
    # The layer where accuracy is lost is named: its SNR against float drops the most. Calibrated
    # on zeros, the input's own quantization range is wrong, so that is where it goes.
    assert (
        record["worst_layers"][0]["layer"] == "x (input quantization)" and record["worst_layers"][0]["snr_drop_db"] > 10
    )
    # the quantization's question: flagged there; the NPU computes what the quantized model computes
    against_float = record["quantization"]
    assert (against_float["verdict"], against_float["layer"]) == ("flagged", "x (input quantization)")
    assert against_float["reason"].startswith("top-1 agreement with float 0.")
    assert "accuracy is lost most at x (input quantization)" in against_float["reason"]
    assert record["verdict"] in ("identical", "within tolerance"), record["reason"]


def corrupted_lowering(exported: Path, name: str) -> Path:
    """MNIST quantized on digits and lowered, its first convolution's weights negated in the TOSA
    the verify stage runs."""
    calibration = load_splits("digits", load_tensors(exported / "inputs.pt"), 0).calibration(100)
    quantized = quantize_exported(
        torch.export.load(exported / "program.pt2"), calibration, "int8", profile_compile_spec("u55")
    )
    torch.export.save(quantized, exported / f"{name}.pt2")
    lowered = lower(exported, name)
    tosa, _ = negate_first_conv2d_weights(load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes)
    replace_partition_tosa(lowered, tosa, template=False)  # what the verify stage runs
    return lowered


def test_a_corrupted_layer_in_the_tosa_is_flagged_and_located(exported):
    lowered = corrupted_lowering(exported, "corrupted")
    record = verify(exported, "corrupted", lowered, dataset="digits", evaluation_samples=500)

    layers = {layer["layer"]: layer for layer in record["location"]["layers"]}
    # conv1 and pool1 before it are exact; conv2 (conv2d_1 + relu_1) is where it starts
    assert layers["conv2d"]["own_steps"] == 0 and layers["max_pool2d"]["own_steps"] == 0
    assert layers["conv2d_1"]["own_steps"] > 10 and layers["conv2d_1"]["ops"] == "conv2d + relu"
    assert layers["conv2d_1"]["module"] == "conv2"
    assert (record["verdict"], record["layer"]) == ("flagged", "conv2d_1")
    # far beyond its tolerance given the NPU's own inputs: flagged there whatever the output shows
    own = layers["conv2d_1"]["own_steps"]
    assert record["reason"].startswith(
        f"layer conv2d_1 (conv2d + relu, conv2) computes something else than the quantized model: {own} steps "
        f"off given the same inputs, {own} times its tolerance of 1 (far beyond rounding"
    )
    # and the NPU path loses top-1 agreement with float that the quantized model keeps
    pairs = record["metrics"]["top1_pairs"]
    assert pairs["quantized_only"] > 10 * max(1, pairs["npu_only"])


def pipeline(
    tmp: Path,
    model_file: str,
    name: str,
    scheme: str = "int8",
    model: dict | None = None,
    profile: str = "u55",
    **options,
) -> dict:
    """export -> quantize -> lower -> verify for a test model file (or `model`), as the workflow runs them."""
    export_and_quantize(tmp, model or {"name": name, "file": model_file}, name, scheme, profile, options.get("dataset"))
    return verify(tmp, name, lower(tmp, name, profile), **options)


def export_and_quantize(
    tmp: Path, model: dict, name: str, scheme: str = "int8", profile: str = "u55", dataset: str | None = None
) -> None:
    """The export and quantize stages for a test model, as the workflow runs them: tmp/program.pt2,
    tmp/inputs.pt and tmp/<name>.pt2."""
    chain.export(tmp, model)
    chain.quantize(tmp, name, scheme, profile, dataset)


def npu_check(record: dict) -> dict:
    """The verdict's check of the NPU path against the quantized model."""
    return next(c for c in record["checks"] if c["name"] == "npu")


def locate_again(tmp: Path, name: str, sources: list | None = None) -> dict:
    """The layer-by-layer comparison on the model's example input, whatever the output's difference."""
    from ethosweep.compile.artifacts import load_quantized
    from ethosweep.runtime.io import read_json
    from ethosweep.verify.numerics import locate_on

    lowered = tmp / f"{name}_lowered"
    npu = load_edge(lowered / "edge.pt2").module()
    quantized = load_quantized(tmp / f"{name}.pt2").module()
    sample = tuple(load_tensors(tmp / "inputs.pt"))
    return locate_on(npu, quantized, sample, sources or read_json(lowered / "tosa_sources.json"))


def test_a_regression_model_is_judged_against_float_not_by_top1(tmp_path):
    """Calibrated on its one example input (no dataset) and evaluated on random inputs: the NPU path
    equals the quantized model, which the NPU's verdict says, with what 40 inputs can show; what the
    model loses against float is not judged, saying why."""
    record = pipeline(tmp_path, "tests/models/regression_two_inputs.py", "regression")
    assert record["classifier"] is False and "agreement_npu_vs_float" not in record["metrics"]
    assert record["metrics"]["max_error_steps"] == 0  # the NPU computes what the quantized model computes
    assert (record["verdict"], record["layer"]) == ("identical", "")
    assert record["reason"] == (
        "identical to the quantized model on all 40 inputs; it differs on at most 7.2 % of inputs (95 %, "
        "Clopper-Pearson)"
    )
    assert record["metrics"]["relative_error_npu_vs_float"] > 0.15
    against_float = record["quantization"]
    assert against_float["verdict"] == "not judged"
    assert against_float["reason"].startswith(
        "not judged against float: without a dataset the model was calibrated on its example inputs alone and "
        "evaluated on random inputs: give it a `dataset` to judge its accuracy (cosine with float on a typical input"
    )
    assert "the weights look untrained" in against_float["reason"]
    assert record["samples"] == 40 and record["sampling"] == "40 (numerics.random_samples, fixed before looking)"


def test_a_random_classifier_with_flat_logits_is_inconclusive(tmp_path):
    record = pipeline(tmp_path, "tests/models/flat_classifier.py", "flat", classifier=True)
    assert record["classifier_evidence"] == "config (classifier: true)"
    assert record["samples"] == 368  # shown within 0.99 by Clopper-Pearson's interval if none disagrees
    against_float = record["quantization"]
    assert against_float["verdict"] == "inconclusive"
    assert against_float["reason"].startswith(
        "top-1 agreement not judged: logits too flat for top-1 to mean anything ("
    )
    assert record["metrics"]["decidable_samples"] < 150
    assert "the weights look untrained" in against_float["reason"]


# ---- the verdict rules on their own -------------------------------------------------------


def judged(metrics: dict, location: dict | None = None, classifier: bool = False, has_data=False, worst=None):
    return judge(metrics, location, Thresholds(), classifier, Evidence(has_data, "", worst))


def test_one_argmax_flip_in_eight_samples_does_not_flag():
    """The issue that started it: 8 samples, agreement 0.875, a healthy model flagged. Without a dataset
    (random inputs it was not calibrated on) what it loses against float is not judged; the NPU path,
    equal to the quantized model on all 8, is identical, with what 8 inputs can show."""
    metrics = {
        "samples": 8,
        "decidable_samples": 8,
        "agreement_decidable": 0.875,
        "agreement_decidable_count": 7,
        "max_error_steps": 0.0,
    }
    verdict = judged(metrics, classifier=True)
    assert verdict.npu.verdict == "identical" and verdict.quantization.verdict == "not judged"
    assert verdict.npu.detail == (
        "identical to the quantized model on all 8 inputs; it differs on at most 31.2 % of inputs (95 %, "
        "Clopper-Pearson)"
    )
    assert verdict.quantization.detail.startswith(
        "not judged against float: without a dataset the model was calibrated on its example inputs alone"
    )
    assert "top-1 agreement with float 0.875 [0.473, 0.997]" in verdict.quantization.detail


def location_of(steps: list[int], own: int = 1, bits: int = 8, kind: str = "conv2d") -> dict:
    layers = [
        {
            "layer": f"conv{i}",
            "ops": "conv2d",
            "module": "",
            "partition": 0,
            "own_steps": own,
            "accumulated_steps": accumulated,
            "kind": kind,
            "bits": bits,
            "order": i,
        }
        for i, accumulated in enumerate(steps)
    ]
    return {"layers": layers, "unpaired": [], "problem": None}


def against_float(ratio: float, samples: int = 100, spread: float = 0.1, allowed: float = 0.0, seed: int = 0):
    """Error energies against float as the verify stage records them, each sample's: the quantized
    model's around 0.1 a sample, the NPU path's `ratio` times it on a typical input (the per-sample
    ratios' geometric mean is `ratio` exactly) with a scatter of `spread` (natural log)."""
    generator = np.random.default_rng(seed)
    quantized = generator.uniform(0.05, 0.15, samples)
    scatter = generator.normal(0, spread, samples)
    npu = quantized * ratio * np.exp(scatter - scatter.mean())
    return {
        "samples": samples,
        "npu": float(npu.sum()),
        "quantized": float(quantized.sum()),
        "allowed_extra": allowed,
        "snr_db_npu": 30.0,
        "snr_db_quantized": 30.0,
        "per_sample": {"npu": npu.tolist(), "quantized": quantized.tolist()},
    }


def test_an_output_off_the_quantized_model_is_judged_by_what_it_costs_against_float():
    metrics = {"samples": 100, "max_error_steps": 3.0, "cosine_npu_vs_float": 0.99, "relative_error_npu_vs_float": 0.05}

    def npu_of(energy, samples=100):
        return judged({**metrics, "samples": samples, "error_against_float": energy}, location_of([0, 1, 3, 3])).npu

    # every layer within its tolerance: 3 output steps of drift, the NPU's error against float the
    # quantized model's: shown within the 3 dB it may add, with the interval and the steps said
    same = npu_of(against_float(1.0))
    assert same.verdict == "ok" and same.detail.startswith("ok, at no accuracy cost shown: the NPU path: ")
    assert (
        "more error energy against float than the quantized model on a typical input (tolerance: at most 3.01 dB; "
        "100 samples); the output is 3 steps off the quantized model on 100 of 100 inputs (ExecuTorch's Arm "
        "operator tests accept 1), which its model tests accept where it costs no accuracy"
    ) in same.detail
    effect = same.effects[0]
    assert effect["low"] < 0 < effect["high"] < 3.01 and effect["shows"] == "within"
    # 3x (4.8 dB), far beyond sampling noise: shown worse, flagged where the drift grows most
    worse = judged({**metrics, "error_against_float": against_float(3.0)}, location_of([0, 1, 3, 3])).npu
    assert (worse.verdict, worse.layer) == ("flagged", "conv2")
    assert worse.detail.startswith("the NPU path loses accuracy the quantized model does not: the NPU path: 4.77 dB")
    # 3x, within sampling noise (the samples scatter far wider than the effect): neither shown, inconclusive,
    # with about how many samples would decide. Not finding a difference is not finding none.
    noisy = npu_of(against_float(3.0, samples=60, spread=4.0), samples=60)
    assert noisy.verdict == "inconclusive" and noisy.more_samples and "samples would decide" in noisy.detail
    # from fewer than 40 inputs a mean is not bounded (skewed per-input values): never decided
    few = npu_of(against_float(1.0, samples=16), samples=16)
    assert few.verdict == "inconclusive" and few.more_samples >= 40
    # 1.5x (1.8 dB): worse, measurably, but within what the NPU may add: ok
    slight = npu_of(against_float(1.5))
    assert slight.verdict == "ok" and slight.effects[0]["low"] > 0


def test_an_output_off_on_one_input_of_many_is_said_as_a_bound_and_the_samples_that_would_decide():
    """encoder_layer int8 (attention preset): 2 steps off on 1 of 80 inputs, equal on the rest. The mean
    effect is unbounded (one differing input has no spread): inconclusive, said with what was seen (within
    2 steps everywhere, beyond ExecuTorch's 1 on a bounded share of inputs) and the inputs at which a
    second one would differ with 95 % probability."""
    quantized = np.full(80, 0.1)
    npu = quantized.copy()
    npu[0] *= 1.3
    energy = {"samples": 80, "npu": float(npu.sum()), "quantized": float(quantized.sum()), "allowed_extra": 0.0}
    energy["per_sample"] = {"npu": npu.tolist(), "quantized": quantized.tolist()}
    metrics = {"samples": 80, "max_error_steps": 2.0, "beyond_tolerance_samples": 1, "differing_samples": 1}
    npu_check = judged({**metrics, "error_against_float": energy}, location_of([0, 1, 2])).npu
    assert npu_check.verdict == "inconclusive" and npu_check.more_samples == 380, npu_check.detail
    assert (
        "the output is 2 steps off the quantized model on 1 of 80 inputs (ExecuTorch's Arm operator tests accept 1); "
        "within 2 steps on all 80 inputs, beyond 1 on at most 5.8 % of inputs (95 %, Clopper-Pearson)"
    ) in npu_check.detail
    assert "about 380 samples would decide" in npu_check.detail


def test_borderline_energy_ratios_are_decided_only_by_their_interval():
    """Near the tolerance (3 dB: twice the quantized model's error energy on a typical input) the verdict
    follows the interval: ok only when it lies under 3 dB, flagged only when above, inconclusive across
    it, at 100 and at 500 samples."""
    metrics = {"samples": 100, "max_error_steps": 3.0}

    def check(ratio, samples, spread=0.3):
        energy = against_float(ratio, samples=samples, spread=spread, seed=samples)
        return judged({**metrics, "samples": samples, "error_against_float": energy}, has_data=True).npu

    for samples in (100, 500):
        twice = check(2.0, samples)  # on the tolerance: no number of samples shows either side
        assert twice.verdict == "inconclusive", (samples, twice.detail)
        assert twice.effects[0]["low"] < 3.0103 < twice.effects[0]["high"]
    # just under and over it: 100 samples do not tell; 500 with less scatter do
    assert check(1.8, 100, spread=0.6).verdict == "inconclusive"
    assert check(1.8, 500, spread=0.1).verdict == "ok"
    assert check(2.3, 500, spread=0.1).verdict == "flagged"
    # each energy counted from what ExecuTorch's output tolerance allows: a quantized model's error far
    # below that allowance leaves the NPU path room to more than double it at no cost
    allowed = against_float(2.3, samples=500, spread=0.1, allowed=200.0)
    loose = judged({**metrics, "samples": 500, "error_against_float": allowed}, has_data=True).npu
    assert (
        loose.verdict == "ok"
        and loose.effects[0]["high"] < 1.5
        and loose.effects[0]["tolerance"] == pytest.approx(3.0103, abs=1e-4)
    )


def test_a_layer_beyond_its_tolerance_is_a_note_unless_the_output_pays_for_it():
    metrics = {"samples": 100, "max_error_steps": 107.0, "output_steps_allowed": 1, "cosine_npu_vs_float": 0.9999}
    jump = location_of([0, 2, 107], bits=16, kind="layer_norm")
    jump["layers"][2].update(layer="add_1", ops="add", module="norm", own_steps=413)
    ok = judged({**metrics, "error_against_float": against_float(1.0)}, jump).npu
    assert (ok.verdict, ok.layer) == ("ok", "")
    assert (
        "note: layer add_1 (add, norm) is 413 int16 steps off given its inputs, beyond the 400 ExecuTorch's a16w8 "
        "layer_norm tests accept (at the quantizer's epsilon 2^-16)"
    ) in ok.detail
    flagged = judged({**metrics, "error_against_float": against_float(4.0)}, jump).npu
    assert (flagged.verdict, flagged.layer) == ("flagged", "add_1")
    assert "it starts at layer add_1 (add, norm), 413 steps off given the same inputs (> 400 int16 steps" in (
        flagged.detail
    )
    # grossly off given the NPU's own inputs (8x its tolerance and 8 int8 steps): flagged whatever the output shows
    jump["layers"][2]["own_steps"] = 3300
    gross = judged({**metrics, "error_against_float": against_float(1.0)}, jump).npu
    assert (gross.verdict, gross.layer) == ("flagged", "add_1")
    # an int8 layer: 9 steps is past 8x its tolerance of 1 and the floor of 8 int8 steps; 8 is not
    int8 = {**metrics, "error_against_float": against_float(1.0), "cosine_npu_vs_float": 0.99}
    for own, verdict in ((9, "flagged"), (8, "ok")):
        layers = location_of([0, own], own=0)
        layers["layers"][1]["own_steps"] = own
        assert judged(int8, layers).npu.verdict == verdict, own


def test_within_the_steps_executorch_accepts_is_said_with_what_n_inputs_show():
    metrics = {"samples": 40, "max_error_steps": 1.0, "differing_samples": 15, "beyond_tolerance_samples": 0}
    within = judged({**metrics, "error_against_float": against_float(1.0, samples=40)}).npu
    assert within.verdict == "within tolerance"
    assert within.detail == (
        "within 1 output step(s) of the quantized model on all 40 inputs, what ExecuTorch's Arm tests accept (1; "
        "15 of the inputs differ at all); beyond it on at most 7.2 % of inputs (95 %, Clopper-Pearson)"
    )


def top1(both: int, npu_only: int, quantized_only: int, neither: int) -> dict:
    """A classifier's metrics with the paired top-1 table of its decidable samples."""
    decided = both + npu_only + quantized_only + neither
    return {
        "samples": decided,
        "max_error_steps": 4.0,
        "decidable_samples": decided,
        "agreement_decidable_count": both + npu_only,
        "agreement_decidable": (both + npu_only) / decided,
        "top1_pairs": {"both": both, "npu_only": npu_only, "quantized_only": quantized_only, "neither": neither},
        "error_against_float": against_float(1.0, samples=decided),
    }


def test_a_classifier_is_judged_by_the_top1_the_npu_loses_against_the_quantized_model():
    """Top-1 agreement with float, the NPU path's minus the quantized model's, with Newcombe's interval
    for paired proportions, against a loss of 1 point (1 - min_agreement)."""

    def npu(metrics):
        return judged(metrics, location_of([0, 4]), classifier=True, has_data=True).npu

    # the borderline case: 4 flips against the NPU and none for it (McNemar p = 0.06) was "ok";
    # on 500 samples its interval, -0.8 points [-1.93, 0.14], straddles the -1 point tolerance
    four = npu(top1(476, 0, 4, 20))
    assert four.verdict == "inconclusive" and "-0.80 points [-1.93, 0.14]" in four.detail, four.detail
    assert "against the quantized model's (tolerance: at least -1.00 points; 500 samples)" in four.detail
    # none either way on 500: within 1 point (about +-0.8 at 95 %); on 100: not shown (about +-3.7)
    assert npu(top1(480, 0, 0, 20)).verdict == "ok"
    assert npu(top1(96, 0, 0, 4)).verdict == "inconclusive"
    # 25 of 500 against the NPU, none for it: -5 points [-7.4, -3.3], shown beyond: flagged
    lost = npu(top1(455, 0, 25, 20))
    assert lost.verdict == "flagged" and lost.effects[1]["high"] < -0.01
    # 3 and 1 on 500: -0.4 points, but the interval reaches past -1: inconclusive; as even on 2,000: ok
    assert npu(top1(476, 1, 3, 20)).verdict == "inconclusive"
    assert npu(top1(1904, 4, 12, 80)).verdict == "ok"


def test_top1_agreement_with_float_is_judged_by_its_exact_interval():
    def quantization(agreed, decided, has_data=True):
        metrics = {**top1(agreed, 0, 0, decided - agreed), "samples": decided}
        return judged(metrics, classifier=True, has_data=has_data).quantization

    assert quantization(499, 499).verdict == "ok"  # 1.000 [0.993, 1.000]
    assert quantization(100, 100).verdict == "inconclusive"  # 1.000 [0.964, 1.000]: 100 cannot show 0.99
    # Clopper-Pearson: 368 that all agree show 0.99, 367 do not
    assert quantization(368, 368).verdict == "ok" and quantization(367, 367).verdict == "inconclusive"
    assert quantization(470, 500).verdict == "inconclusive"  # 0.94 [0.915, 0.959], real data, no layer to name
    # on random inputs, or without data, the same numbers are not judged: either way
    for has_data in (False, "random"):
        assert quantization(470, 500, has_data).verdict == quantization(499, 499, has_data).verdict == "not judged"


def test_nothing_compared_is_never_ok():
    metrics = {
        "samples": 8,
        "cosine_npu_vs_float": 0.99,
        "relative_error_npu_vs_float": 0.05,
        "uncompared_outputs": [0],
    }
    verdict = judged(metrics)
    assert verdict.npu.verdict == "inconclusive" and verdict.npu.detail.startswith("nothing compared: no output")
    assert "(outputs 0)" in verdict.npu.detail


def test_outputs_without_a_quantization_scale_are_named():
    metrics = {"samples": 100, "max_error_steps": 0.0, "uncompared_outputs": [1, 2], "cosine_npu_vs_float": 0.99}
    check = judged({**metrics, "error_against_float": against_float(1.0)}).npu
    assert check.verdict == "identical"
    assert check.detail.endswith("output(s) 1, 2 carry no quantization scale and were not compared in steps")


def test_worse_output_with_unpaired_activations_is_flagged_without_a_layer():
    metrics = {"samples": 100, "max_error_steps": 3.0, "cosine_npu_vs_float": 0.99, "relative_error_npu_vs_float": 0.05}
    location = location_of([0, 0, 0], own=0)
    location["unpaired"] = [
        {"layer": f"mul_{i}", "ops": op, "module": "norm", "kind": "layer_norm", "composite": "layer_norm", "order": 9}
        for i, op in enumerate(["mean", "sub", "mul", "rsqrt", "mul"])
    ]
    worse = judged({**metrics, "error_against_float": against_float(3.0)}, location).npu
    assert (worse.verdict, worse.layer) == ("flagged", "")
    assert (
        "the layer where it starts could not be found: every paired layer is within its tolerance; the error may "
        "be in layer_norm (decomposed into 5 quantized operators: mean, sub, mul, rsqrt) (3 of 8 activations paired "
        "with the NPU's tensors)"
    ) in worse.detail
    # shown within against float: ok, whatever could not be paired
    assert judged({**metrics, "error_against_float": against_float(1.0)}, location).npu.verdict == "ok"


def test_no_layers_to_blame_is_said_not_raised():
    metrics = {
        "samples": 100,
        "max_error_steps": 3.0,
        "cosine_npu_vs_float": 0.99,
        "error_against_float": against_float(3.0),
    }
    internal = location_of([0, 3])
    for layer in internal["layers"]:
        layer["internal"] = True
    npu = judged(metrics, internal).npu
    assert npu.verdict == "flagged" and "could not be found" in npu.detail


def test_int16_tolerances_are_what_executorchs_a16w8_tests_accept_at_their_scale():
    thresholds = Thresholds()
    int16_step = 1 / 32767  # a [0, 1] or [-1, 1] output at int16
    # the tests' own atol/rtol (and qtol 1) in int16 steps of their output range
    assert thresholds.steps_allowed(16, "sigmoid") == round((1e-3 + 1e-3 * 1.0) / int16_step) + 1
    assert thresholds.steps_allowed(16, "tanh") == round((1e-3 + 2e-3 * 1.0) / int16_step) + 1
    assert thresholds.steps_allowed(16, "_softmax") == round(0.003 / int16_step / 10) * 10
    assert thresholds.steps_allowed(8, "layer_norm") == 1  # int8: qtol=1 for every operator
    assert Thresholds(max_error_steps_int16={"gelu": 64}).steps_allowed(16, "gelu") == 64


def test_sample_counts_are_fixed_before_looking():
    assert random_samples_needed(40, classifier=True, thresholds=Thresholds()) == (
        368,
        "368 for top-1 agreement to be shown within 0.99 (Clopper-Pearson)",
    )
    assert random_samples_needed(40, classifier=False, thresholds=Thresholds()) == (
        40,
        "40 (numerics.random_samples, fixed before looking)",
    )


def test_an_int32_accumulator_is_not_taken_for_the_int8_activation():
    """The TOSA of an ADD of two rescaled branches holds an int32 sum and, after it, the int8
    RESCALE: both descend from the add node and have the activation's shape. The locator pairs the
    int8 one (before, a ResNet-18 whose output was 2 steps off was flagged at 68,681,609 steps)."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed

    from ethosweep.verify.layers import is_quantize
    from ethosweep.verify.pairing import pair_activations

    class AddThenQuantize(torch.nn.Module):
        def forward(self, a, b):
            total = torch.add(a, b)
            return torch.ops.quantized_decomposed.quantize_per_tensor.default(total, 0.1, 0, -128, 127, torch.int8)

    graph = torch.fx.symbolic_trace(AddThenQuantize()).graph
    quantize = next(n for n in graph.nodes if is_quantize(n))
    add = quantize.args[0].name
    plain = {quantize.name: torch.zeros(1, 4, dtype=torch.int8)}
    # in TOSA order the int32 tensor comes last here: the dtype, not the order, must decide
    values = [{"rescaled": np.zeros((1, 4), np.int8), "sum": np.zeros((1, 4), np.int32)}]
    sources = [{"rescaled": {"sources": [add], "order": [0, 1]}, "sum": {"sources": [add], "order": [0, 1]}}]
    assert pair_activations(graph, sources, values, plain) == {quantize.name: (0, "rescaled")}


# ---- every layer accounted for, in its own layout and width -----------------------------------


def test_the_layout_comes_from_the_lowering_not_the_tensors_shape(tmp_path):
    """8 channels at 8x8: NCHW and NHWC have the same shape; the recorded dimension order decides."""
    record = pipeline(tmp_path, "tests/models/square_cnn.py", "square")
    assert npu_check(record)["verdict"] in PASSED
    location = locate_again(tmp_path, "square")
    layers = {layer["layer"]: layer for layer in location["layers"]}
    assert {"conv2d", "conv2d_1", "conv2d_2"} <= set(layers) and location["unpaired"] == []
    assert max(layer["own_steps"] for layer in location["layers"]) <= 1
    from ethosweep.runtime.io import read_json

    recorded = read_json(tmp_path / "square_lowered" / "tosa_sources.json")
    orders = {tuple(t["order"]) for p in recorded for t in p.values() if t["order"] and len(t["order"]) == 4}
    assert (0, 2, 3, 1) in orders  # the convolutions run on NHWC tensors
    # read as NCHW, as their shape alone would allow, those NHWC tensors are compared transposed
    guessed = [
        {name: {**t, "order": [0, 1, 2, 3] if t["order"] == [0, 2, 3, 1] else t["order"]} for name, t in p.items()}
        for p in recorded
    ]
    assert max(layer["own_steps"] for layer in locate_again(tmp_path, "square", guessed)["layers"]) > 10


def test_an_error_in_an_activation_that_could_not_be_paired_is_not_charged_elsewhere(exported):
    """The corrupted convolution of the test above, with its TOSA tensors' provenance removed: the
    next layer cannot be given the NPU's inputs, so the verdict says where it could not look."""
    from ethosweep.runtime.io import read_json, write_json

    lowered = corrupted_lowering(exported, "hidden")
    # as if its TOSA tensors were in a layout no activation has: the NPU computes it, but it cannot be paired
    sources = read_json(lowered / "tosa_sources.json")
    for tensors in sources:
        for tensor in tensors.values():
            if {"conv2d_1", "relu_1"} & set(tensor["sources"]):
                tensor["order"] = [0, 1, 2, 3]
    write_json(lowered / "tosa_sources.json", sources)
    record = verify(exported, "hidden", lowered, dataset="digits", evaluation_samples=500)
    check = npu_check(record)
    # the NPU path measurably loses top-1 against float: flagged, and where it could not look is said
    assert (check["verdict"], check["layer"]) == ("flagged", ""), check
    assert check["detail"].startswith("the NPU path loses accuracy the quantized model does not: the NPU path: ")
    top1 = check["effects"][1]
    assert top1["shows"] == "beyond" and top1["high"] < -0.01  # shown losing more than 1 point of top-1
    assert "could not be paired with the NPU's tensors (conv2d_1): the error may start there" in check["detail"]
    paired = record["location"]["paired"]
    assert f"({paired} of {paired + 1} activations paired with the NPU's tensors)" in check["detail"]


def test_int16_layers_are_judged_in_int16_steps_by_what_executorch_accepts(tmp_path):
    """GELU and softmax with int16 activations: healthy, so not flagged for their rounding (softmax
    judged at its output, by ExecuTorch's tolerance for it), every activation paired."""
    record = pipeline(tmp_path, "tests/models/gelu_softmax.py", "sm16", scheme="a16w8")
    assert record["verdict"] in PASSED, record["reason"]
    location = locate_again(tmp_path, "sm16")
    assert location["unpaired"] == [] and all(layer["bits"] == 16 for layer in location["layers"])
    assert max(layer["own_steps"] for layer in location["layers"] if not layer["internal"]) <= 1
    softmax = [layer for layer in location["layers"] if layer["kind"] == "softmax"]
    assert [layer["ops"] for layer in softmax if not layer["internal"]] == ["mul"]  # its output
    assert {"gelu", "exp", "reciprocal"} <= {layer["ops"] for layer in location["layers"]}  # paired by data flow


def test_a_decomposed_layer_norm_is_judged_at_its_output_by_executorchs_tolerance(tmp_path):
    """LayerNorm with int16 activations, quantized as aot_arm_compiler does (epsilon 2^-12): its
    nine operators are judged together at its output, which differs by more than the 400 int16 steps
    ExecuTorch's own a16w8 layer_norm tests accept (they quantize with epsilon 2^-16). The model's
    output is no further from float than the quantized model's: ok, with that layer in a note."""
    # its per-input energy ratios scatter (0.2-4x): 40 inputs leave it undecided, 100 show it
    record = pipeline(tmp_path, "tests/models/gelu_layernorm.py", "ln16", scheme="a16w8", random_samples=100)
    location = record["location"]
    norm = [layer for layer in location["layers"] if layer["kind"] == "layer_norm"]
    assert len(norm) >= 8 and [layer["ops"] for layer in norm if not layer["internal"]] == ["add"]
    assert location["unpaired"] == [] and "rsqrt" in {layer["ops"] for layer in norm}
    output = next(layer for layer in norm if not layer["internal"])
    assert output["own_steps"] > 400
    assert (record["verdict"], record["layer"]) == ("ok", "")
    assert npu_check(record)["detail"].startswith("ok, at no accuracy cost shown: the NPU path: ")
    assert (
        f"note: layer {output['layer']} (add, norm) is {output['own_steps']} int16 steps off given its inputs, "
        "beyond the 400 ExecuTorch's a16w8 layer_norm tests accept"
    ) in record["reason"]

    # a real 16-bit discrepancy, before it: the first linear layer's weights negated in its TOSA
    lowered = tmp_path / "ln16_lowered"
    tosa, _ = negate_first_conv2d_weights(load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes)
    replace_partition_tosa(lowered, tosa, template=False)
    broken = verify(tmp_path, "ln16", lowered)
    assert (broken["verdict"], broken["layer"]) == ("flagged", "linear"), npu_check(broken)
    assert npu_check(broken)["detail"].startswith("layer linear (linear, fc1) computes something else")
    assert "int16 steps for linear (far beyond rounding" in npu_check(broken)["detail"]


def test_several_partitions_are_compared_layer_by_layer(tmp_path):
    """DS-CNN on Ethos-U55: its average pool stays on the CPU, between two partitions."""
    model = {
        "name": "ds_cnn",
        "import": "executorch.examples.models.mlperf_tiny:DSCNNKWS",
        "inputs": [{"shape": [1, 1, 49, 10], "dtype": "float32", "range": [-1, 1]}],
    }
    pipeline(tmp_path, "", "ds_cnn", model=model)
    location = locate_again(tmp_path, "ds_cnn")
    assert {layer["partition"] for layer in location["layers"]} == {0, 1}
    assert max(layer["own_steps"] for layer in location["layers"]) <= 1 and location["unpaired"] == []
    # the average pool runs on the CPU between them (PyTorch runs it on both paths); the dropouts only
    # move values and are gone from the lowered program: neither is an unpaired activation
    assert {layer["kind"] for layer in location["off_npu"]} == {"avg_pool2d"}


def test_a_transformer_is_paired_without_its_reshapes_and_its_fused_sums_are_accounted_for(tmp_path):
    """models/tiny_vit.py: attention reshapes and transposes tensors the lowering flattens, and a
    decomposed mean's sum is folded into the divisor's rescale (an int32 accumulator only). Reshapes
    are recomputed from their paired inputs, never paired (a misread flattened tensor once flagged
    a healthy `view` thousands of steps off); the folded sums are accounted for by the layer that
    reads them; nothing is left unpaired, and the healthy model is ok."""
    record = pipeline(tmp_path, "models/tiny_vit.py", "vit")
    location = record["location"]
    assert not [layer["ops"] for layer in location["layers"] if is_exact(layer["ops"])]
    assert location["unpaired"] == [], location["unpaired"]
    assert npu_check(record)["verdict"] in PASSED, npu_check(record)


def test_int16_convolutions_folded_into_their_residual_add_are_accounted_for(tmp_path):
    """MLPerf Tiny's ResNet8 with int16 activations: each block's last convolution (and the
    strided shortcut, whose input the lowering slices) reaches the NPU's add as an INT48
    accumulator, rescaled straight into it, so it has no int16 tensor of its own (and the reference
    model cannot return INT48). The add accounts for it; nothing is left unpaired, the model is ok."""
    model = {
        "name": "resnet8",
        "import": "executorch.examples.models.mlperf_tiny:ResNet8",
        "inputs": [{"shape": [1, 3, 32, 32], "dtype": "float32", "range": [-1, 1]}],
    }
    record = pipeline(tmp_path, "", "r8", scheme="a16w8", model=model)
    location = record["location"]
    assert location["unpaired"] == [], location["unpaired"]
    assert {layer["bits"] for layer in location["layers"]} == {16}
    assert npu_check(record)["verdict"] in PASSED, npu_check(record)


def test_the_transpose_of_a_layers_input_is_not_taken_for_its_result(tmp_path):
    """tests/models/split_conv.py, int16: the second convolution has no int16 result of its own (its
    INT48 sum is rescaled into the add); the transpose of its input (the split's half) carries its
    name and its shape. Taken for its result, the convolution looked thousands of int16 steps off
    while the output was one step off, and healthy YOLO cells were flagged. It is accounted for by
    the add, and the model is ok."""
    record = pipeline(tmp_path, "tests/models/split_conv.py", "sc16", scheme="a16w8")
    assert record["verdict"] in PASSED, record["reason"]
    location = record["location"]
    assert location["unpaired"] == [] and [layer["module"] for layer in location["layers"]] == ["cv1", ""]
    assert max(layer["own_steps"] for layer in location["layers"]) <= 1


def test_an_activation_whose_result_is_only_in_a_scrambled_layout_is_not_paired_downstream(tmp_path):
    """tests/models/conv_relu_flatten.py, int16: ExecuTorch moves the ReLU after the permute and the
    flatten that follow it, so its result is in the TOSA only as [1, 24, 1, 56]. Looked for downstream
    of its input, it was paired with the convolution's result before the clamp, thousands of steps
    off while the output was one step off (the speech preset's GRU and LSTM spotters were flagged so).
    It is left unpaired, and the model is ok."""
    record = pipeline(tmp_path, "tests/models/conv_relu_flatten.py", "crf", scheme="a16w8")
    assert record["verdict"] in PASSED, record["reason"]
    location = record["location"]
    assert [layer["layer"] for layer in location["unpaired"]] == ["relu"]
    assert max(layer["own_steps"] for layer in location["layers"]) <= 1


@pytest.mark.parametrize(("scheme", "profile"), [("a16w8", "u55"), ("a16w8", "u85"), ("int8", "u55"), ("int8", "u85")])
def test_a_healthy_mixer_block_is_ok_whatever_its_layer_norm_shows(tmp_path, scheme, profile):
    """LayerNorm -> Linear -> GELU -> Linear with a residual: with int16 activations its LayerNorm is
    hundreds of int16 steps beyond ExecuTorch's 400 given its inputs, while the output is as close to
    float as the quantized model's. ok, with the layer named in a note, on both NPU families."""
    record = pipeline(tmp_path, "tests/models/mixer_block.py", "mixer", scheme=scheme, profile=profile)
    check = npu_check(record)
    energy = record["metrics"]["error_against_float"]
    assert energy["npu"] <= 2 * energy["quantized"]  # what makes it ok: no worse against float
    if scheme == "a16w8":
        assert (record["verdict"], record["layer"]) == ("ok", ""), record["reason"]
        assert check["detail"].startswith("ok, at no accuracy cost shown: the NPU path: ")
        assert "note: layer add_1 (add, norm) is " in check["detail"]
        assert "beyond the 400 ExecuTorch's a16w8 layer_norm tests accept" in record["reason"]
    else:  # int8: within a step of the quantized model, said with what 40 inputs show, without an interval
        assert (record["verdict"], record["layer"]) == ("within tolerance", ""), record["reason"]
        assert check["detail"].startswith("within 1 output step(s) of the quantized model on all 40 inputs")
        assert check["detail"].endswith("beyond it on at most 7.2 % of inputs (95 %, Clopper-Pearson)")


def test_every_way_an_activation_is_accounted_for_names_a_test_that_exists():
    from ethosweep.verify.accounted import ACCOUNTED_FOR

    for entry in ACCOUNTED_FOR:
        path, _, name = entry.test.partition("::")
        assert f"def {name}(" in (REPO / path).read_text(), entry.name


def test_a_random_weight_model_on_random_data_gets_a_judged_verdict(tmp_path):
    """MobileNetV2 with random weights: its BatchNorms calibrated before export and `dataset: random`
    (calibration and evaluation inputs of one distribution): both checks judged, no "inconclusive"."""
    model = {
        "name": "mv2",
        "import": "torchvision.models:mobilenet_v2",
        "inputs": [{"shape": [1, 3, 32, 32], "dtype": "float32", "range": [0, 1]}],
        "init": {"batchnorm": "calibrate"},
    }
    record = pipeline(tmp_path, "", "mv2", model=model, dataset="random")
    assert record["verdict"] in PASSED, record["reason"]
    assert record["quantization"]["verdict"] == "not judged"
    # the NPU path is judged against the quantized model; the loss against float is shown, not judged
    assert record["checks"][1]["detail"].startswith("not judged against float: on random inputs")
    assert record["data"].endswith("random inputs in their value range (calibrated on others of the kind)")
    assert record["metrics"]["float_output_max_abs"] > 1e-3  # not BatchNorm's initial 1e-9


def test_the_u85_profile_takes_the_u55_verification_where_both_verify_the_same_program_tosa_and_delegation(
    tmp_path,
):
    from ethosweep.results.table import verification_of
    from ethosweep.verify.chain import export, lower, quantize, verify

    export(tmp_path, {"name": "mnist", "file": "models/mnist.py"})
    quantize(tmp_path, "u55", profile="u55")
    quantize(tmp_path, "u85", profile="u85", same_as="u55")
    lowered = {profile: lower(tmp_path, profile, profile=profile) for profile in ("u55", "u85")}
    other = {
        "report": str(tmp_path / "u55.json"),
        "bundle_io": str(tmp_path / "u55_io.pt"),
        **{
            key: str(lowered["u55"] / f"{name}.json")
            for key, name in (("lower_meta", "lower"), ("tosa_sources", "tosa_sources"), ("delegation", "delegation"))
        },
    }
    shared = dict(quantize_meta=str(tmp_path / "u85.quantize.json"), delegation=str(lowered["u85"] / "delegation.json"))
    shared |= {f"same_as_{key}": path for key, path in other.items()}  # as the workflow names them
    # decided from the two lowerings, before the u55 verification has run (its job need not wait)
    u85 = verify(tmp_path, "u85", lowered["u85"], **shared)
    assert u85["same_as"].startswith("the u55 profile's verification") and u85["same_as_report"] == other["report"]
    assert not (tmp_path / "u55.json").exists()
    u55 = verify(tmp_path, "u55", lowered["u55"])
    # read as every reader of a cell's verification reads it: the u55 record, said to be that
    compiled = {"partitions": u55["tosa_partitions"]}
    read, why = verification_of(compiled, "", str(tmp_path / "u85.json"), None)
    assert why == "" and read == {**u55, "same_as": u85["same_as"]}
    assert torch.load(tmp_path / "u85_io.pt", weights_only=True) == {"same_as": other["bundle_io"]}

    # what makes it sound: verified on its own, the u85 profile gets the same record
    alone = verify(tmp_path, "u85", lowered["u85"])
    assert {k: v for k, v in alone.items() if k != "seconds"} == {k: v for k, v in u55.items() if k != "seconds"}
    # a quantization of its own: verified on its own
    quantize(tmp_path, "u85", profile="u85")
    assert "same_as" not in verify(tmp_path, "u85", lowered["u85"], **shared)


def test_a_partly_delegated_cell_whose_partition_reads_none_of_its_inputs_is_verified(tmp_path):
    """tests/models/where_select.py on Ethos-U55: `gt` and `where` stay on the CPU (a boolean operand),
    the constants they compare with are a partition that reads none of the inputs its delegate call
    passes (the CPU's quantize of the input), and the next partition takes that quantize node itself.
    The TOSA reference model is given what each partition's TOSA reads: verified, not unverified."""
    record = pipeline(tmp_path, "tests/models/where_select.py", "where")
    delegation = json.loads((tmp_path / "where_lowered" / "delegation.json").read_text())
    assert {"aten_gt_tensor", "aten_where_self"} <= set(delegation["cpu_reasons"])
    assert record["verdict"] == "identical", record["reason"]
    assert record["metrics"]["max_error_steps"] == 0


def test_each_gate_of_an_lstm_cell_is_paired_with_its_own_table_not_a_slice(tmp_path):
    """tests/models/gates.py, a16w8: an LSTM cell's four gates cut from one sum, each through a sigmoid
    or tanh that ExecuTorch lowers as a TABLE without provenance. Found through the data flow from
    the sum, a gate is its table's result, never one of the four SLICEs of the sum before it (which
    have its type and shape: the tiny preset's executorch_lstm was flagged at `sigmoid`, 6,224 steps
    off given its inputs, while the multiply reading it was 1 step off)."""
    record = pipeline(tmp_path, "tests/models/gates.py", "gates", scheme="a16w8")
    layers = {layer["layer"]: layer for layer in record["location"]["layers"]}
    gates = [name for name in layers if name.startswith(("sigmoid", "tanh"))]
    assert sorted(gates) == ["sigmoid", "sigmoid_1", "sigmoid_2", "tanh"]
    assert max(layers[name]["own_steps"] for name in gates) <= 1, {name: layers[name] for name in gates}
    assert record["verdict"] in PASSED, record["reason"]


def test_a_sum_the_quantized_model_clamps_and_the_npu_keeps_whole_is_noted_not_flagged(tmp_path):
    """tests/models/saturated_skip.py, a16w8 on Ethos-U85 (SSDlite's and MobileNetV3's flagged residual
    adds): ExecuTorch rescales a convolution's INT48 accumulator straight into the add in int32, so where
    the quantized model clamps that convolution's int16 activation the NPU keeps it whole. The add is
    then far off given its inputs as the quantized model clamps them, and within a step given them
    unclamped: what the NPU computes is the sum the model means, so the output decides the verdict, and
    the note says why. A convolution broken in the TOSA among the same clamps is still flagged."""
    record = pipeline(tmp_path, "tests/models/saturated_skip.py", "skip", scheme="a16w8", profile="u85")
    add = next(layer for layer in record["location"]["layers"] if layer["layer"] == "add")
    # the stem (the skip) and the projection: both clamped by the quantized model, neither by the NPU
    assert add["saturated_inputs"] == ["conv2d", "conv2d_2"], add
    assert add["own_steps"] > 8 * 256 and add["unsaturated_steps"] <= 1, add
    assert (record["verdict"], record["layer"]) == ("ok", ""), record["reason"]
    detail = npu_check(record)["detail"]
    assert detail.startswith("ok, at no accuracy cost shown: the NPU path: ")
    assert (
        f"note: layer add (add, blocks.0) is {add['own_steps']} int16 steps off given its inputs: on this input the "
        "quantized model clamps conv2d, conv2d_2 to int16 range, which the NPU carries on unclamped (in int32); "
        f"given them unclamped, the layer is {add['unsaturated_steps']} int16 step(s) off"
    ) in detail
    # the NPU path is no further from float than the quantized model: it keeps what the model clamps
    (energy,) = [e for e in npu_check(record)["effects"] if "error energy" in e["effect"]]
    assert energy["estimate"] < 0, energy

    # the projection's weights negated in the TOSA: off given its inputs unclamped too, so flagged
    lowered = tmp_path / "skip_lowered"
    edge = load_edge(lowered / "edge.pt2").graph_module.lowered_module_0.processed_bytes
    replace_partition_tosa(lowered, negate_first_conv2d_weights(edge, nth=2)[0], template=False)
    broken = verify(tmp_path, "skip", lowered)
    assert (broken["verdict"], broken["layer"]) == ("flagged", "add"), npu_check(broken)
    assert npu_check(broken)["detail"].startswith("layer add (add, blocks.0) computes something else")


def test_a_sum_that_starts_at_a_literal_zero_is_paired_only_with_what_the_npu_computed(tmp_path):
    """tests/models/plus_zero.py: re-parameterisable blocks as timm writes them, `out = scale_out + 0`
    then `out += conv(x)`. Which tensor does the NPU compute for the `+ 0`? The lowering keeps it: a
    TOSA ADD of the branch and a constant, named after the add. In int8 its sum is rescaled to the
    add's own int8 activation (paired with that, and identical); in a16w8 the sum goes on in int32
    into the next add, so no TOSA tensor holds the add's activation: it is paired with none (never
    with a neighbour), and nothing is flagged there."""
    from ethosweep.runtime.io import read_json

    for scheme in ("int8", "a16w8"):
        work = tmp_path / scheme
        work.mkdir()
        record = pipeline(work, "tests/models/plus_zero.py", "pz", scheme=scheme)
        sources = read_json(work / "pz_lowered" / "tosa_sources.json")[0]
        (plus_zero,) = [t for t, r in sources.items() if t.startswith("tosa_add") and r["sources"] == ["add"]]
        # one operand is the 0: a constant (ExecuTorch's names for them), through the input's rescale
        operands = [i for o in sources[plus_zero]["inputs"] for i in [o, *sources.get(o, {}).get("inputs", [])]]
        assert any("frozen_param" in i or "pre_computed" in i for i in operands), operands
        located = locate_again(work, "pz")
        layers = {layer["layer"]: layer for layer in located["layers"]}
        if scheme == "int8":
            assert record["verdict"] == "identical", record["reason"]
            assert layers["add"]["own_steps"] == 0
        else:
            assert record["verdict"] in PASSED, record["reason"]
            unpaired = {u["layer"]: u for u in located["unpaired"]}
            assert "add" not in layers and "add" in unpaired, located["unpaired"]
        assert located["problem"] is None
