"""The verdict on a model's numerics: ok, inconclusive (and why), or flagged (and where).

Two questions, each answered only as far as the evidence goes:

1. **Does the NPU compute what the quantized model computes?** The TOSA reference model against
   quantized PyTorch, in quantization steps of each tensor's own scale and width. What is allowed
   is what ExecuTorch's own Arm tests accept (backends/arm/test, 1.5.1): one step for int8 (`qtol=1`,
   tester/test_pipeline.py) and for most int16 operators of the a16w8 tests; for int16 the
   table-lookup and reduction operators allow 128 steps (gelu, exp, rsqrt, reciprocal, sum:
   `qtol=128`; softmax's `atol=0.003` on a [0, 1] output is ~100 int16 steps) and layer_norm 400
   (`qtol=400`): one int16 step is 1/256 of an int8 step, and these operators round inside
   their decompositions. A layer is judged by the operator of the model it comes from, so every
   operator of a decomposed layer_norm gets layer_norm's tolerance (`numerics.max_error_steps`,
   `numerics.max_error_steps_int16`).
   - Nothing compared (no output is quantized): inconclusive, never ok.
   - Output within its tolerance: ok.
   - Beyond it, ethosweep.verify.locate compares layer by layer: the first layer whose own result
     (given the same inputs) is beyond its tolerance is flagged. If none is, but some activations
     could not be paired with a TOSA tensor, the error may come from them: inconclusive, naming
     them. If every layer is paired and within its tolerance, the output's difference is rounding
     accumulated over the layers, as ExecuTorch's model tests accept it with an absolute tolerance
     on the output (MobileNetV2 atol=0.25, DeiT-tiny 1.5: a few output steps). Independent
     roundings of at most t steps each add up like a random walk, ~t*sqrt(L) after L layers: ok
     within that bound (with the note), flagged beyond it at the layer where the drift grows most.
2. **How much does quantization cost against float?**
   - For a classifier *by evidence* (a dataset with labels, or `classifier: true` in the model's
     config): top-1 agreement with float, counted only on samples whose float top-1 margin is at
     least one output quantization step (below that, rounding alone may flip the argmax, so the
     sample says nothing), and only judged with enough such samples for the threshold to be
     reachable: one disagreement must not fail it, so n >= 1 / (1 - min_agreement) (100 for 0.99).
     A model without a dataset is evaluated on 3 / (1 - min_agreement) random inputs (300): if
     none disagrees, the 95 % upper bound on its disagreement rate is then 1 - min_agreement
     (the "rule of three").
   - For any other model: cosine similarity and relative error (Frobenius norm) of the NPU path's
     outputs against float, with ExecuTorch's thresholds for quantized models
     (TosaPipelineINT: cosine >= 0.9, relative error <= 0.15) and its cleaning of the reference:
     float values below one output step count as 0, a reference that is all 0 is not judged,
     and the relative error is not judged when the reference's norm is at quantization-noise
     scale (below step * sqrt(values)).
   A failed accuracy check is flagged with the layer where the SNR against float drops most, if
   the model was evaluated on real data. Without a dataset, the model was calibrated on its
   example inputs alone and is evaluated on random inputs the calibration never saw: a loss
   against float then says more about that than about the model, so it is inconclusive, with
   the same numbers (and whether the weights look untrained, which makes float no reference).

Torch-free: it works on the metrics the verify stage measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# ExecuTorch's Arm test pipeline's defaults, cited above.
EXECUTORCH_QTOL = 1
EXECUTORCH_COSINE = 0.9
EXECUTORCH_FROBENIUS = 0.15
# int16 steps allowed per operator kind: ExecuTorch 1.5.1's a16w8 operator tests (cited above);
# "default" for every other operator (conv, linear, add, mul: qtol=1).
EXECUTORCH_INT16_QTOL = {
    "default": 1,
    "layer_norm": 400,
    "gelu": 128,
    "exp": 128,
    "rsqrt": 128,
    "reciprocal": 128,
    "sum": 128,
    "mean": 128,
    "softmax": 128,
    "log_softmax": 128,
    "sigmoid": 128,
    "tanh": 128,
}


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


def lowering_check(
    max_steps: float | None,
    location: dict | None,
    thresholds: Thresholds,
    samples: int,
    output_allowed: float | None = None,
) -> Check:
    """NPU (TOSA reference model) against the quantized model (see the module docstring).
    `output_allowed`: the output's own tolerance (its width and the operator producing it)."""
    allowed = thresholds.max_error_steps if output_allowed is None else output_allowed
    if max_steps is None:
        return Check(
            "lowering",
            "inconclusive",
            "nothing compared: no output of the model is quantized, so the NPU path could not be compared "
            "with the quantized model in steps",
        )
    located = location and not location.get("problem") and location.get("layers")
    paired = sorted(location["layers"], key=lambda layer: layer.get("order", 0)) if located else []
    unpaired = (location or {}).get("unpaired") or []
    counted = f"{len(paired)} of {len(paired) + len(unpaired)} activations paired with the NPU's tensors"
    # a decomposed operator is judged at its last activation (its internal ones are part of it)
    layers = [layer for layer in paired if not layer.get("internal")]
    tolerance = lambda layer: thresholds.steps_allowed(layer.get("bits", 8), layer.get("kind", ""))  # noqa: E731
    broken = next((layer for layer in layers if layer["own_steps"] > tolerance(layer)), None)
    within = max_steps <= allowed
    off = f"the output is {max_steps:g} steps off" + (f" (within {allowed:g})" if within else f" (> {allowed:g})")
    # An output within its tolerance is ok, as in ExecuTorch's own tests, whatever a layer shows:
    # pairing a transformer's reshaped, transposed tensors is not certain enough to overrule it.
    if within:
        return Check(
            "lowering", "ok", f"NPU within {max_steps:g} output step(s) of the quantized model on {samples} samples"
        )
    if broken is not None and not broken.get("unpaired_inputs"):
        # the layers before it (in graph order) in its partition: what it was given
        before = [layer for layer in layers[: layers.index(broken)] if layer["partition"] == broken["partition"]]
        inputs = max((layer["accumulated_steps"] for layer in before), default=0)
        return Check(
            "lowering",
            "flagged",
            f"layer {_layer_label(broken)} computes something else than the quantized model: "
            f"{broken['own_steps']} steps off given the same inputs (> {tolerance(broken):g}{_width(broken)}; "
            f"the layers before it within {inputs}); {off}; {counted}" + _int16_hint(broken, tolerance(broken)),
            layer=broken["layer"],
        )
    if not located:
        why = (location or {}).get("problem") or "no layer-by-layer comparison"
        return Check(
            "lowering",
            "inconclusive",
            f"NPU differs from the quantized model: {off}, and the layer where it starts could not be found: {why}",
        )
    if broken is not None:
        return Check(
            "lowering",
            "inconclusive",
            f"not located: {off}; layer {_layer_label(broken)} is {broken['own_steps']} steps off given its "
            f"inputs, but activations before it could not be paired with the NPU's tensors "
            f"({', '.join(broken['unpaired_inputs'])}), so its inputs were not the NPU's: the error may start "
            f"there ({counted})",
        )
    if unpaired:
        return Check(
            "lowering",
            "inconclusive",
            f"not located: {off}, every paired layer is within its tolerance, and the error appears in operators "
            f"that could not be paired: {_unpaired_summary(unpaired)} ({counted})",
        )
    bound, how = rounding_bound([tolerance(layer) for layer in layers], allowed)
    if max_steps <= bound:
        worst_own = max(layer["own_steps"] for layer in layers)
        return Check(
            "lowering",
            "ok",
            f"ok, accumulated rounding: every one of the {len(layers)} layers within its tolerance given the "
            f"same inputs (at most {worst_own} step(s)), the output {max_steps:g} steps off, within what rounding "
            f"over {len(layers)} layers explains ({how})",
        )
    grows, growth = _fastest_drift(layers)
    return Check(
        "lowering",
        "flagged",
        f"{off}, more than rounding over {len(layers)} layers explains ({how}), though every layer is within "
        f"its tolerance on its own; the drift grows most at layer {_layer_label(grows)} (+{growth} steps)",
        layer=grows["layer"],
    )


def rounding_bound(tolerances: list[float], output_allowed: float) -> tuple[float, str]:
    """How far rounding alone may carry the output: independent roundings of at most t_i steps add
    up like a random walk, sqrt(sum of t_i^2) (t*sqrt(L) for L layers of one tolerance t), and
    never less than the output's own tolerance. Each t_i is in its layer's own steps: for int8
    layers of similar scales that is the output's step; an int16 layer_norm's 400 steps carry its
    rounding into the layers after it."""
    bound = max(output_allowed, math.sqrt(sum(t * t for t in tolerances)))
    if len(set(tolerances)) <= 1:
        t = tolerances[0] if tolerances else output_allowed
        return bound, f"{t:g} x sqrt({len(tolerances)}) = {bound:.1f}"
    return bound, f"sqrt of the sum of the {len(tolerances)} layers' squared tolerances = {bound:.1f}"


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


def _fastest_drift(layers: list[dict]) -> tuple[dict, int]:
    """The layer whose accumulated difference grows most over the largest before it (its partition)."""
    best, growth = layers[-1], -1
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
    has_data: bool,
) -> Check:
    """The NPU path against float, judged as far as the evidence goes (see the module docstring)."""
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


def _judged(detail: str, weights_untrained: str, has_data: bool, worst_layer: dict | None) -> Check:
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
    return f"{layer['layer']} ({layer['ops']}{module})"


def judge(
    metrics: dict,
    location: dict | None,
    thresholds: Thresholds,
    classifier: bool,
    weights_untrained: str,
    worst_layer: dict | None,
    has_data: bool,
) -> Verdict:
    return Verdict(
        [
            lowering_check(
                metrics.get("max_error_steps"),
                location,
                thresholds,
                metrics.get("samples") or 0,
                metrics.get("output_steps_allowed"),
            ),
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
