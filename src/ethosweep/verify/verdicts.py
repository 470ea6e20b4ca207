"""The verdict on a model's numerics: ok, inconclusive (and why), or flagged (and where).

The user's question is: *does deploying this model on the NPU lose accuracy that the quantized
model does not already lose?* Two checks answer it, each only as far as the evidence goes.

1. **The lowering: is the NPU path worse against float than the quantized model?** The TOSA
   reference model (what the NPU computes) and the quantized model in PyTorch, both against the
   float model, on the same samples (`npu_worse_than_quantized`):
   - a classifier *by evidence* (labelled data, or `classifier: true`) by top-1 agreement with
     float, on the samples whose float top-1 margin is at least one output step: the samples where
     only the quantized model agrees with float against those where only the NPU does, with
     McNemar's exact one-sided test at 5 % (sampling noise: with 500 samples, 5 flips one way and
     none the other is measurable, one is not);
   - any model (a classifier whose logits are too flat for top-1 too) by its error against float:
     worse when the NPU's error energy exceeds the quantized model's by more than the quantized
     model's own (3 dB of SNR: the NPU may add as much error as quantization already leaves) and
     by more than ExecuTorch's output tolerance allows (its tests accept the NPU `qtol` steps from
     the quantized reference at every output value), and the paired per-sample difference is
     more than twice its standard error (sampling noise, ~98 % one-sided).
   Where the outputs differ at all, ethosweep.verify.locate compares layer by layer, in each
   layer's own steps, against the tolerance ExecuTorch's own Arm tests give its operator
   (`EXECUTORCH_INT16_QTOL`, `numerics.max_error_steps`). Then:
   - output within its tolerance of the quantized model: ok;
   - a layer *grossly* off given the NPU's own inputs (`GROSS_FACTOR` times its tolerance and at
     least `GROSS_FLOOR_INT8_STEPS` int8 steps: a negated weight, a transposed layout) is
     flagged at that layer whatever the output shows;
   - the NPU path measurably worse than the quantized model: flagged at the first layer beyond
     its tolerance (or where the drift grows most), or, if that cannot be found, flagged saying so;
   - not measurably worse: ok; a layer beyond its tolerance is named in a note (the compiler's
     business, in the cell's record, not a verdict on the model);
   - nothing to compare (no output quantized): inconclusive, never ok.
2. **The model against float: beyond ExecuTorch's model-level thresholds?**
   - a classifier by evidence: top-1 agreement with float (`min_agreement`), counted on the
     decidable samples above and judged only with enough of them that one flip cannot fail it,
     n >= 1 / (1 - min_agreement) (100 for 0.99); a model without a dataset is evaluated on
     3 / (1 - min_agreement) random inputs (300: if none disagrees, the 95 % upper bound on its
     disagreement rate is 1 - min_agreement, the "rule of three");
   - any other model: cosine similarity and relative error (Frobenius norm) against float, with
     ExecuTorch's thresholds for quantized models (TosaPipelineINT: cosine >= 0.9, relative error
     <= 0.15) and its cleaning of the reference (float values below one output step count as 0,
     an all-0 reference is not judged, nor the relative error of a reference at noise scale).
   Beyond them it is flagged with the layer where the SNR against float drops most, if the model
   was evaluated on real data. Without a dataset the model was calibrated on its example inputs
   alone and evaluated on inputs calibration never saw: inconclusive, with the numbers. With
   `dataset: random` (random weights, no real data: calibrated and evaluated on random inputs of
   one distribution) the loss against float measures no accuracy: said in a note, not judged.

Torch-free: it works on the metrics the verify stage measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# ExecuTorch's Arm test pipeline's defaults (backends/arm/test/tester/test_pipeline.py: the
# Ethos-U pipelines compare with qtol=1, atol=1e-3, rtol=1e-3; TosaPipelineINT's model checks).
EXECUTORCH_QTOL = 1
EXECUTORCH_COSINE = 0.9
EXECUTORCH_FROBENIUS = 0.15
# int16 steps allowed per operator kind, from ExecuTorch's a16w8 operator tests (backends/arm/test/ops).
# Their comparison accepts atol + qtol * scale + rtol * |reference| per value
# (tester/analyze_output_utils.py), so where a test sets no qtol of its own, its atol and rtol are
# counted in int16 steps of the test's output range; where it does, its qtol is taken as written.
# "default" is every other operator (conv, linear, add, mul: qtol=1, their atol scale-dependent).
EXECUTORCH_INT16_QTOL = {
    "default": 1,
    "layer_norm": 400,  # test_layer_norm: qtol=400
    "gelu": 128,  # test_gelu a16w8: qtol=128
    "exp": 128,  # test_exp a16w8: qtol=128
    "rsqrt": 128,  # test_rsqrt a16w8: qtol=128
    "reciprocal": 128,  # test_reciprocal a16w8: qtol=128
    "sum": 128,  # test_sum a16w8: qtol=128
    # test_softmax's a16w8 attention test: atol=0.003 on a [0, 1] output, 0.003 * 32767 = 98 steps
    "softmax": 100,
    # test_mean_dim a16w8: default qtol=1 with atol=rtol=1e-3 on means of [0, 1) inputs:
    # (1e-3 + 1e-3 * 0.5) * 32767 + 1 = 50 steps
    "mean": 50,
    # test_sigmoid 16a8w: default qtol=1, atol=rtol=1e-3 on a [0, 1] output: 2e-3 * 32767 + 1 = 67
    "sigmoid": 67,
    # test_tanh 16a8w: rtol=2e-3 with atol=1e-3 on a [-1, 1] output: 3e-3 * 32767 + 1 = 99
    "tanh": 99,
    # no a16w8 test upstream: judged as the table lookups it is made of (exp, log), 128
    "log_softmax": 128,
}
# A layer this many times its tolerance off, and at least this many int8 steps (int16 steps / 256)
# off given the NPU's own inputs, computes something else, whatever the output shows. The largest
# tolerance any ExecuTorch operator test gives is 400 int16 steps, 1.6 int8 steps; 8 int8 steps is
# 3 % of an int8 range, 5x that. The lowering errors the tests reproduce (a negated weight, a
# transposed layout) are 10-64 steps and more.
GROSS_FACTOR = 8
GROSS_FLOOR_INT8_STEPS = 8
# "Measurably" worse: McNemar's exact one-sided test for top-1, at 5 %; for the error against
# float, a paired mean difference beyond twice its standard error (~98 % one-sided).
SIGNIFICANCE = 0.05
STANDARD_ERRORS = 2.0


@dataclass(frozen=True)
class Thresholds:
    max_error_steps: float = EXECUTORCH_QTOL
    min_agreement: float = 0.99
    min_cosine: float = EXECUTORCH_COSINE
    max_relative_error: float = EXECUTORCH_FROBENIUS
    max_error_steps_int16: dict = field(default_factory=lambda: dict(EXECUTORCH_INT16_QTOL), hash=False)

    def steps_allowed(self, bits: int, kind: str = "") -> float:
        """What a tensor of this width, computed by this kind of operator, may differ by, in its own steps."""
        if bits != 16:
            return self.max_error_steps
        table = {**EXECUTORCH_INT16_QTOL, **(self.max_error_steps_int16 or {})}
        return table.get(kind.lstrip("_"), table["default"])

    def samples_for_agreement(self) -> int:
        """Decidable samples needed before top-1 agreement is judged: one flip must not fail it."""
        return math.ceil(1 / (1 - self.min_agreement) - 1e-9) if self.min_agreement < 1 else 1_000_000

    def samples_to_draw(self) -> int:
        """Random inputs for a classifier without data: zero flips then bound the rate (rule of three)."""
        return math.ceil(3 / (1 - self.min_agreement) - 1e-9) if self.min_agreement < 1 else 1_000_000


@dataclass
class Check:
    name: str  # "lowering" (NPU vs quantized model) or "accuracy" (against float)
    verdict: str  # ok | inconclusive | flagged
    detail: str
    layer: str = ""  # where, for a flagged check

    def as_dict(self) -> dict:
        return {"name": self.name, "verdict": self.verdict, "detail": self.detail, "layer": self.layer}


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        verdicts = [c.verdict for c in self.checks]
        return "flagged" if "flagged" in verdicts else "inconclusive" if "inconclusive" in verdicts else "ok"

    @property
    def reason(self) -> str:
        """Why it is not ok (or what an ok check notes), in one line."""
        shown = [c for c in self.checks if c.verdict != "ok"] or [c for c in self.checks if c.detail.startswith("ok, ")]
        return "; ".join(c.detail for c in shown)

    @property
    def layer(self) -> str:
        return next((c.layer for c in self.checks if c.verdict == "flagged" and c.layer), "")

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "layer": self.layer,
            "checks": [c.as_dict() for c in self.checks],
        }


def lowering_check(metrics: dict, location: dict | None, thresholds: Thresholds, classifier: bool) -> Check:
    """Is the NPU path worse against float than the quantized model? (see the module docstring)"""
    max_steps, samples = metrics.get("max_error_steps"), metrics.get("samples") or 0
    uncompared = metrics.get("uncompared_outputs") or []
    if max_steps is None:
        return Check(
            "lowering",
            "inconclusive",
            "nothing compared: no output of the model is quantized, so the NPU path could not be compared "
            "with the quantized model in steps" + (f" (outputs {_indices(uncompared)})" if uncompared else ""),
        )
    unseen = (
        f"; output(s) {_indices(uncompared)} carry no quantization scale and were not compared in steps"
        if uncompared
        else ""
    )
    allowed = metrics.get("output_steps_allowed") or thresholds.max_error_steps
    if max_steps <= allowed:
        return Check(
            "lowering",
            "ok",
            f"NPU within {max_steps:g} output step(s) of the quantized model on {samples} samples{unseen}",
        )
    off = f"the output is {max_steps:g} steps off the quantized model (> {allowed:g})"
    located = bool(location and not location.get("problem") and location.get("layers"))
    paired = sorted(location["layers"], key=lambda layer: layer.get("order", 0)) if located else []
    unpaired = (location or {}).get("unpaired") or []
    counted = f"{len(paired)} of {len(paired) + len(unpaired)} activations paired with the NPU's tensors"
    # a decomposed operator is judged at its last activation (its internal ones are part of it)
    layers = [layer for layer in paired if not layer.get("internal")]
    tolerance = lambda layer: thresholds.steps_allowed(layer.get("bits", 8), layer.get("kind", ""))  # noqa: E731
    beyond = [layer for layer in layers if layer["own_steps"] > tolerance(layer)]
    # given the NPU's own inputs: a layer after an unpaired activation was given the quantized model's
    located_beyond = [layer for layer in beyond if not layer.get("unpaired_inputs")]
    broken = next(iter(located_beyond), None)
    gross = next((layer for layer in located_beyond if _gross(layer, tolerance(layer))), None)
    worse, evidence = npu_worse_than_quantized(metrics, classifier, thresholds)
    if gross is not None:
        return Check(
            "lowering",
            "flagged",
            f"layer {_layer_label(gross)} computes something else than the quantized model: {gross['own_steps']} "
            f"steps off given the same inputs, {gross['own_steps'] / tolerance(gross):.0f} times its tolerance of "
            f"{tolerance(gross):g}{_width(gross)} (far beyond rounding: flagged whatever the output shows); {off}; "
            f"{evidence}; {counted}",
            layer=gross["layer"],
        )
    if worse == "worse":
        if broken is not None:
            before = [layer for layer in layers[: layers.index(broken)] if layer["partition"] == broken["partition"]]
            inputs = max((layer["accumulated_steps"] for layer in before), default=0)
            return Check(
                "lowering",
                "flagged",
                f"the NPU path loses accuracy the quantized model does not: {evidence}; it starts at layer "
                f"{_layer_label(broken)}, {broken['own_steps']} steps off given the same inputs (> "
                f"{tolerance(broken):g}{_width(broken)}; the layers before it within {inputs}); {off}; {counted}"
                + _int16_hint(broken, tolerance(broken)),
                layer=broken["layer"],
            )
        if layers and not beyond and not unpaired:
            grows, growth = _fastest_drift(layers)
            return Check(
                "lowering",
                "flagged",
                f"the NPU path loses accuracy the quantized model does not: {evidence}; every layer is within its "
                f"tolerance on its own, and the drift grows most at layer {_layer_label(grows)} (+{growth} steps); "
                f"{off}; {counted}",
                layer=grows["layer"],
            )
        return Check(
            "lowering",
            "flagged",
            f"the NPU path loses accuracy the quantized model does not: {evidence}; {off}; the layer where it "
            f"starts could not be found: {_not_found(location, beyond, unpaired)} ({counted})",
        )
    if worse == "unknown":
        return Check(
            "lowering",
            "inconclusive",
            f"{off}, and whether that costs accuracy could not be measured: {evidence}",
        )
    note = ""
    if beyond:
        more = f" (and {len(beyond) - 1} more)" if beyond[1:] else ""
        note = f"; note: {_layer_note(beyond[0], tolerance(beyond[0]))}{more}"
    return Check(
        "lowering",
        "ok",
        f"ok, the NPU path is as close to float as the quantized model ({evidence}), though {off}{note}{unseen}",
    )


def npu_worse_than_quantized(metrics: dict, classifier: bool, thresholds: Thresholds) -> tuple[str, str]:
    """Whether the NPU path is measurably worse against float than the quantized model: ('worse' |
    'not worse' | 'unknown', the evidence in one line). See the module docstring for the tests."""
    flips = metrics.get("top1_discordant")
    if classifier and flips and (metrics.get("decidable_samples") or 0) >= thresholds.samples_for_agreement():
        only_quantized, only_npu = flips["quantized_only"], flips["npu_only"]
        p = mcnemar_one_sided(only_quantized, only_npu)
        said = (
            f"top-1 agrees with float on {only_quantized} decidable sample(s) where only the quantized model does, "
            f"and {only_npu} where only the NPU does (of {metrics['decidable_samples']}; McNemar p = {p:.2g})"
        )
        return ("worse" if p < SIGNIFICANCE else "not worse"), said
    energy = metrics.get("error_against_float")
    if not energy or energy.get("samples", 0) < 2:
        return "unknown", "no per-sample errors against float to compare"
    npu, quantized, allowed = energy["npu"], energy["quantized"], energy["allowed_extra"]
    extra = npu - quantized
    material = extra > max(quantized, allowed)
    measurable = extra > 0 and extra / energy["samples"] > STANDARD_ERRORS * energy["standard_error"]
    said = (
        f"error against float: SNR {_db(energy['snr_db_npu'])} on the NPU path, {_db(energy['snr_db_quantized'])} for "
        f"the quantized model, on {energy['samples']} samples"
    )
    return ("worse" if material and measurable else "not worse"), said


def mcnemar_one_sided(only_first: int, only_second: int) -> float:
    """The exact one-sided p-value that the first is right more often than the second by chance:
    P(X >= only_first) for X ~ Binomial(only_first + only_second, 1/2)."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(only_first, n + 1)) / 2**n


def _db(value) -> str:
    return "exact" if value is None else f"{value:.1f} dB"


def _gross(layer: dict, allowed: float) -> bool:
    steps = layer["own_steps"]
    int8_steps = steps / 256 if layer.get("bits") == 16 else steps
    return steps > GROSS_FACTOR * allowed and int8_steps >= GROSS_FLOOR_INT8_STEPS


def _layer_note(layer: dict, allowed: float) -> str:
    """'layer add_1 (add, norm): 413 int16 steps off given its inputs, beyond the 400 ExecuTorch's a16w8
    layer_norm tests accept (at epsilon 2^-16)'"""
    width = "int16 " if layer.get("bits") == 16 else ""
    epsilon = " (at the quantizer's epsilon 2^-16)" if layer.get("bits") == 16 and allowed > 1 else ""
    return (
        f"layer {_layer_label(layer)} is {layer['own_steps']} {width}steps off given its inputs, beyond the "
        f"{allowed:g} ExecuTorch's {'a16w8 ' if layer.get('bits') == 16 else ''}{layer.get('kind') or 'operator'} "
        f"tests accept{epsilon}"
    )


def _not_found(location: dict | None, beyond: list[dict], unpaired: list[dict]) -> str:
    if not location or location.get("problem") or not location.get("layers"):
        return (location or {}).get("problem") or "no layer-by-layer comparison"
    if beyond:
        layer = beyond[0]
        return (
            f"layer {_layer_label(layer)} is {layer['own_steps']} steps off given its inputs, but activations "
            f"before it could not be paired with the NPU's tensors ({', '.join(layer['unpaired_inputs'])}): the "
            "error may start there"
        )
    return f"every paired layer is within its tolerance; the error may be in {_unpaired_summary(unpaired)}"


def _indices(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)


def _int16_hint(layer: dict, allowed: float) -> str:
    """For an int16 table lookup or normalisation beyond ExecuTorch's tolerance: what that tolerance
    assumed, and how to accept the difference."""
    if layer.get("bits") != 16 or allowed <= 1:
        return ""
    return (
        f"; ExecuTorch's own a16w8 {layer.get('kind')} tests accept {allowed:g} with the quantizer's epsilon at "
        "2^-16, finer than its default 2^-12 (aot_arm_compiler's, and this sweep's), which leaves small tensors "
        f"such as a variance few int16 levels; to accept it, raise numerics.max_error_steps_int16.{layer.get('kind')}"
    )


def _width(layer: dict) -> str:
    return f" int16 steps for {layer.get('kind') or 'this operator'}" if layer.get("bits") == 16 else ""


def _fastest_drift(layers: list[dict]) -> tuple[dict | None, int]:
    """The layer whose accumulated difference grows most over the largest before it (its partition);
    (None, 0) when there is none."""
    best, growth = (layers[-1] if layers else None), -1
    for i, layer in enumerate(layers):
        before = [x["accumulated_steps"] for x in layers[:i] if x["partition"] == layer["partition"]]
        grown = layer["accumulated_steps"] - max(before, default=0)
        if grown > growth:
            best, growth = layer, grown
    return best, max(growth, 0)


def _unpaired_summary(unpaired: list[dict]) -> str:
    """'layer_norm (decomposed into 9 quantized operators: mean, sub, mul, ...); conv2d_1 (conv2d + relu)'"""
    by_operator: dict[str, list[dict]] = {}
    for layer in unpaired:
        by_operator.setdefault(layer.get("composite") or layer["layer"], []).append(layer)
    parts = []
    for layers in by_operator.values():
        if len(layers) == 1:
            parts.append(f"{layers[0]['layer']} ({layers[0]['ops']})")
        else:
            names = ", ".join(dict.fromkeys(layer["ops"] for layer in layers))
            parts.append(f"{layers[0].get('kind')} (decomposed into {len(layers)} quantized operators: {names})")
    return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")


def accuracy_check(
    metrics: dict,
    thresholds: Thresholds,
    classifier: bool,
    weights_untrained: str,
    worst_layer: dict | None,
    has_data: bool | str,
) -> Check:
    """The NPU path against float, judged as far as the evidence goes (see the module docstring).
    `has_data`: real data (True), none (False), or "random" (`dataset: random`)."""
    where = _worst(worst_layer)
    if classifier:
        decided, samples = metrics.get("decidable_samples") or 0, metrics.get("samples") or 0
        needed = thresholds.samples_for_agreement()
        if decided < needed:
            flat = f"{decided} of {samples} samples have a float top-1 margin of at least one output step"
            why = (
                "logits too flat for top-1 to mean anything"
                if decided < samples / 2
                else "too few samples for the threshold to be reachable"
            )
            untrained = f"; {weights_untrained}" if weights_untrained else ""
            return Check(
                "accuracy",
                "inconclusive",
                f"top-1 agreement not judged: {why} ({flat}; {needed} are needed to judge "
                f"{thresholds.min_agreement:g}{untrained})",
            )
        agreement = metrics["agreement_decidable"]
        if agreement >= thresholds.min_agreement:
            return Check("accuracy", "ok", f"top-1 agreement with float {agreement:.3f} on {decided} samples")
        detail = f"top-1 agreement with float {agreement:.3f} < {thresholds.min_agreement:g} on {decided} samples" + (
            f"; {where}" if where else ""
        )
        return _judged(detail, weights_untrained, has_data, worst_layer)
    if metrics.get("reference_all_zero"):
        return Check(
            "accuracy",
            "inconclusive",
            f"the float outputs are all below one output step (at most {metrics['float_output_max_abs']:.2g}): "
            "nothing to compare against" + (f"; {weights_untrained}" if weights_untrained else ""),
        )
    cosine, relative = metrics.get("cosine_npu_vs_float"), metrics.get("relative_error_npu_vs_float")
    failures = []
    if cosine is not None and cosine < thresholds.min_cosine:
        failures.append(f"cosine with float {cosine:.3f} < {thresholds.min_cosine:g}")
    if relative is not None and relative > thresholds.max_relative_error:
        failures.append(f"relative error against float {relative:.3f} > {thresholds.max_relative_error:g}")
    if not failures:
        shown = f"cosine with float {cosine:.4f}" + (
            f", relative error {relative:.3f}"
            if relative is not None
            else " (relative error not judged: float outputs at noise scale)"
        )
        return Check("accuracy", "ok", shown)
    return _judged("; ".join(failures) + (f"; {where}" if where else ""), weights_untrained, has_data, worst_layer)


def _judged(detail: str, weights_untrained: str, has_data: bool | str, worst_layer: dict | None) -> Check:
    if has_data == "random":
        # calibrated and evaluated on random inputs of one distribution (`dataset: random`): a model
        # with random weights, or without real data; its loss against float on such inputs measures
        # no accuracy, so it is said, not judged (the lowering check answers for the NPU)
        return Check(
            "accuracy",
            "ok",
            f"ok, not judged against float: on random inputs (dataset: random) the loss against float measures "
            f"no accuracy ({detail})",
        )
    if not has_data:
        untrained = f"; and {weights_untrained}" if weights_untrained else ""
        return Check(
            "accuracy",
            "inconclusive",
            f"{detail}; but without a dataset the model was calibrated on its example inputs alone and "
            f"evaluated on random inputs{untrained}: give it a `dataset` to judge its accuracy",
        )
    if not worst_layer:
        return Check("accuracy", "inconclusive", f"{detail}; no layer could be named")
    return Check("accuracy", "flagged", detail, layer=worst_layer["layer"])


def _worst(worst_layer: dict | None) -> str:
    if not worst_layer:
        return ""
    return (
        f"accuracy is lost most at {worst_layer['layer']} (its SNR against float falls by "
        f"{worst_layer['snr_drop_db']} dB, to {worst_layer['snr_db']} dB)"
    )


def _layer_label(layer: dict) -> str:
    module = f", {layer['module']}" if layer.get("module") else ""
    uncertain = "; pairing not certain: another TOSA tensor is about as close" if layer.get("uncertain") else ""
    return f"{layer['layer']} ({layer['ops']}{module}{uncertain})"


def judge(
    metrics: dict,
    location: dict | None,
    thresholds: Thresholds,
    classifier: bool,
    weights_untrained: str,
    worst_layer: dict | None,
    has_data: bool | str,
) -> Verdict:
    return Verdict(
        [
            lowering_check(metrics, location, thresholds, classifier),
            accuracy_check(metrics, thresholds, classifier, weights_untrained, worst_layer, has_data),
        ]
    )


def random_samples_needed(
    minimum: int, values_per_sample: int, classifier: bool, thresholds: Thresholds, cap: int = 1000
) -> tuple[int, str]:
    """How many random inputs a model without a dataset is evaluated on, and why.

    A classifier needs enough for top-1 agreement to be judged (see Thresholds.samples_for_agreement).
    Otherwise the cosine and the relative error are computed over every output value of every
    sample: with N values, the relative error's own relative standard error is about 1/sqrt(2N),
    so 400 values keep it within ~3.5 %.
    """
    if classifier:
        needed = thresholds.samples_to_draw()
        why = f"{needed} for top-1 agreement to be judged against {thresholds.min_agreement:g} (rule of three)"
    else:
        needed = math.ceil(400 / max(1, values_per_sample))
        why = f"{needed} for 400 output values ({values_per_sample} per sample) behind the cosine and relative error"
    count = min(cap, max(minimum, needed))
    if count < needed:
        why += f", capped at {cap}"
    return count, why
