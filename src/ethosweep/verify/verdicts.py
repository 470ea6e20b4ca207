"""The verdict on a model's numerics: ok, inconclusive (and why), or flagged (and where).

Two questions, each answered only as far as the evidence goes:

1. **Does the NPU compute what the quantized model computes?** The TOSA reference model against
   quantized PyTorch, in output quantization steps. ExecuTorch's own Arm tests allow one step
   (`qtol=1`, backends/arm/test/tester/test_pipeline.py). Beyond it, ethosweep.verify.locate finds the
   first layer whose own result differs by more than that given the same inputs: that layer is
   flagged. If every layer is within it on its own and only the output drifts further, it is
   accumulated rounding, which ExecuTorch's model tests accept through an absolute tolerance on
   the output (MobileNetV2: atol=0.25): ok, with a note.
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


@dataclass(frozen=True)
class Thresholds:
    max_error_steps: float = EXECUTORCH_QTOL
    min_agreement: float = 0.99
    min_cosine: float = EXECUTORCH_COSINE
    max_relative_error: float = EXECUTORCH_FROBENIUS

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


def lowering_check(max_steps: float | None, location: dict | None, thresholds: Thresholds, samples: int) -> Check:
    """NPU (TOSA reference model) against the quantized model."""
    allowed = thresholds.max_error_steps
    if max_steps is None:
        return Check("lowering", "ok", "no quantized outputs to compare in steps")
    if max_steps <= allowed:
        return Check(
            "lowering", "ok", f"NPU within {max_steps:g} output step(s) of the quantized model on {samples} samples"
        )
    if not location or location.get("problem") or not location.get("layers"):
        why = (location or {}).get("problem") or "no layer-by-layer comparison"
        return Check(
            "lowering",
            "inconclusive",
            f"NPU differs from the quantized model by {max_steps:g} output steps (> {allowed:g}) and the "
            f"layer where it starts could not be found: {why}",
        )
    layers = location["layers"]
    broken = next((layer for layer in layers if layer["own_steps"] > allowed), None)
    if broken is not None:
        before = [layer for layer in layers[: layers.index(broken)] if layer["partition"] == broken["partition"]]
        inputs = max((layer["accumulated_steps"] for layer in before), default=0)
        return Check(
            "lowering",
            "flagged",
            f"layer {_layer_label(broken)} computes something else than the quantized model: "
            f"{broken['own_steps']} steps off given the same inputs (the layers before it within {inputs}); "
            f"the output is {max_steps:g} steps off",
            layer=broken["layer"],
        )
    worst_own = max(layer["own_steps"] for layer in layers)
    return Check(
        "lowering",
        "ok",
        f"ok, accumulated rounding: every layer within {worst_own} step(s) of the quantized model given "
        f"the same inputs, the output {max_steps:g} steps (ExecuTorch's model tests allow this on the output)",
    )


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
            lowering_check(metrics.get("max_error_steps"), location, thresholds, metrics.get("samples") or 0),
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
