"""The verdict on a model's numerics: measured effects with their 95 % intervals, judged against
tolerances, as ok (shown within), flagged (shown beyond) or inconclusive (neither, and about how many
samples would decide).

The user's question is: *does deploying this model on the NPU lose accuracy that the quantized
model does not already lose?* Two checks answer it, each only as far as the evidence goes. Each
states the effect it measured and its interval (ethosweep.verify.intervals); "ok" only when the
interval lies inside the tolerance (an equivalence test), never because no difference was found.

1. **The lowering: is the NPU path worse against float than the quantized model?** The TOSA
   reference model (what the NPU computes) and the quantized model in PyTorch, both against the
   float model, on the same samples (`lowering_effects`):
   - any model: the NPU path's error energy against float over the quantized model's (sums of
     squared differences over every output value), in dB, with Fieller's interval over the
     samples. Tolerance (`energy_tolerance_db`): 3 dB, the NPU may add as much error as
     quantization already leaves, or more where ExecuTorch's output tolerance allows it (its Arm
     tests accept the NPU `qtol` steps from the quantized reference at every output value);
   - a classifier by evidence (labelled data, or `classifier: true`): top-1 agreement with float,
     the NPU path's minus the quantized model's, on the samples whose float top-1 margin is at least
     one output step, with Newcombe's interval for paired proportions. Tolerance: the NPU path may
     lose at most 1 - min_agreement (1 point at 0.99) of agreement against the quantized model: the
     whole budget the accuracy check allows against float, which no upstream test sets tighter
     (ExecuTorch's Arm model tests compare outputs with atol, not top-1).
   Where the outputs differ at all, ethosweep.verify.locate compares layer by layer, in each
   layer's own steps, against the tolerance ExecuTorch's own Arm tests give its operator
   (`EXECUTORCH_INT16_QTOL`, `numerics.max_error_steps`). Then:
   - a layer *grossly* off given the NPU's own inputs (`GROSS_FACTOR` times its tolerance and at
     least `GROSS_FLOOR_INT8_STEPS` int8 steps: a negated weight, a transposed layout) is
     flagged at that layer whatever the output shows;
   - an effect shown beyond its tolerance: flagged at the first layer beyond its tolerance (or
     where the drift grows most), or, if that cannot be found, flagged saying so;
   - every effect shown within its tolerance: ok; a layer beyond its tolerance is named in a note
     (the compiler's business, in the cell's record, not a verdict on the model);
   - otherwise inconclusive, with about how many samples would decide;
   - nothing to compare (no output quantized): inconclusive, never ok.
2. **The model against float: beyond ExecuTorch's model-level thresholds?**
   - a classifier by evidence: top-1 agreement with float on the decidable samples, with Wilson's
     interval, against `min_agreement` (0.99: shown within needs 381 samples that all agree);
   - any other model: cosine similarity and relative error (Frobenius norm) against float, with
     percentile-bootstrap intervals over the samples, against ExecuTorch's thresholds for
     quantized models (TosaPipelineINT: cosine >= 0.9, relative error <= 0.15) and its cleaning of
     the reference (float values below one output step count as 0, an all-0 reference is not
     judged, nor the relative error of a reference at noise scale).
   Shown beyond them on real data: flagged at the layer where the SNR against float drops most.
   Without a dataset (calibrated on the example inputs alone): inconclusive, with the numbers. With
   `dataset: random` the loss against float measures no accuracy: shown, "not judged", and left
   out of the verdict.

Where data are cheap (random inputs), the verify stage draws more samples until every check
decides, up to `numerics.max_random_samples` (ethosweep.verify.numerics).

Torch-free: it works on the metrics the verify stage measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ethosweep.verify.intervals import (
    Z95,
    Effect,
    Interval,
    bootstrap,
    cosine_of,
    decide,
    paired_difference,
    ratio_db,
    relative_error_of,
    wilson,
    would_decide,
)

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

    def samples_to_draw(self) -> int:
        """Random inputs for a classifier without data: enough that, if none disagrees, Wilson's interval
        shows the agreement within min_agreement (n >= z^2 * min / (1 - min): 381 at 0.99)."""
        if self.min_agreement >= 1:
            return 1_000_000
        return math.ceil(Z95**2 * self.min_agreement / (1 - self.min_agreement) - 1e-9)


# The statuses a check can end in. "not judged": the check measured something that says nothing of
# accuracy (float on random inputs): shown, never counted in the verdict.
NOT_JUDGED = "not judged"


@dataclass
class Check:
    name: str  # "lowering" (NPU vs quantized model) or "accuracy" (against float)
    verdict: str  # ok | inconclusive | flagged | not judged
    detail: str
    layer: str = ""  # where, for a flagged check
    effects: list = field(default_factory=list)  # the measured effects (Effect.as_dict) behind it
    more_samples: int | None = None  # inconclusive: about how many samples would decide it

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "detail": self.detail,
            "layer": self.layer,
            "effects": self.effects,
            **({"more_samples": self.more_samples} if self.more_samples else {}),
        }


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        verdicts = [c.verdict for c in self.checks if c.verdict != NOT_JUDGED]
        return "flagged" if "flagged" in verdicts else "inconclusive" if "inconclusive" in verdicts else "ok"

    @property
    def reason(self) -> str:
        """Why it is not ok, or for an ok verdict what was measured, in one line."""
        shown = [c for c in self.checks if c.verdict in ("flagged", "inconclusive")] or self.checks
        return "; ".join(c.detail for c in shown)

    @property
    def layer(self) -> str:
        return next((c.layer for c in self.checks if c.verdict == "flagged" and c.layer), "")

    @property
    def more_samples(self) -> int | None:
        """About how many samples would decide every inconclusive check (None: more would not help)."""
        wanted = [c.more_samples for c in self.checks if c.verdict == "inconclusive"]
        return max(wanted) if wanted and all(wanted) else None

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "layer": self.layer,
            "checks": [c.as_dict() for c in self.checks],
        }


def lowering_effects(metrics: dict, classifier: bool, thresholds: Thresholds) -> list[Effect]:
    """What the lowering check weighs: the NPU path's error energy against float relative to the
    quantized model's (any model), and its top-1 agreement with float minus the quantized model's
    (a classifier by evidence). See the module docstring for the tolerances."""
    effects = []
    energy = metrics.get("error_against_float") or {}
    per_sample = energy.get("per_sample") or {}
    npu, quantized, allowed = per_sample.get("npu"), per_sample.get("quantized"), energy.get("allowed_extra") or 0.0
    if npu and not sum(npu) and not sum(quantized):
        effects.append(
            Effect(
                "error energy against float on either path: ",
                Interval(0.0, 0.0, 0.0, len(npu)),
                0.0,
                "above",
                after=" (both exact)",
            )
        )
    elif npu and sum(quantized) > 0:
        effects.append(
            Effect(
                "the NPU path: ",
                ratio_db(npu, quantized),
                energy_tolerance_db(sum(quantized), allowed),
                "above",
                " dB",
                " more error energy against float than the quantized model",
            )
        )
    elif npu and allowed > 0:
        # the quantized model is exact against float: the NPU path against what ExecuTorch's tolerance allows
        effects.append(
            Effect(
                "the NPU path's error energy against float (the quantized model's is 0): ",
                ratio_db(npu, [allowed / len(npu)] * len(npu)),
                0.0,
                "above",
                " dB",
                " of what ExecuTorch's output tolerance allows",
            )
        )
    elif npu:  # an exact quantized model, and no quantized output to allow the NPU path anything
        effects.append(
            Effect(
                "the NPU path's error energy against float: ",
                Interval(sum(npu), sum(npu), sum(npu), len(npu)),
                0.0,
                "above",
                after=" (the quantized model's is 0)",
            )
        )
    pairs = metrics.get("top1_pairs")
    if classifier and pairs and sum(pairs.values()):
        effects.append(
            Effect(
                "the NPU path's top-1 agreement with float: ",
                paired_difference(pairs["both"], pairs["npu_only"], pairs["quantized_only"], pairs["neither"]),
                -(1 - thresholds.min_agreement),
                "below",
                " points",
                " against the quantized model's",
                scale=100,
            )
        )
    return effects


def energy_tolerance_db(quantized_energy: float, allowed_extra: float) -> float:
    """How much more error energy against float the NPU path may have than the quantized model, in dB:
    as much again as the quantized model's own (3 dB of SNR: the NPU may add as much error as
    quantization already leaves), or the extra ExecuTorch's output tolerance allows where that is
    more (its tests accept the NPU `qtol` steps from the quantized reference at every output value)."""
    if quantized_energy <= 0:
        return math.inf if allowed_extra > 0 else 0.0
    return 10 * math.log10(1 + max(quantized_energy, allowed_extra) / quantized_energy)


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
    effects = lowering_effects(metrics, classifier, thresholds)
    decided, needed = decide(effects)
    measured = "; ".join(e.text() for e in effects) or "no per-sample errors against float to compare"
    recorded = [e.as_dict() for e in effects]
    allowed = metrics.get("output_steps_allowed") or thresholds.max_error_steps
    off = f"the output is {max_steps:g} steps off the quantized model (> {allowed:g})"
    within_steps = max_steps <= allowed
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
    if gross is not None:
        return Check(
            "lowering",
            "flagged",
            f"layer {_layer_label(gross)} computes something else than the quantized model: {gross['own_steps']} "
            f"steps off given the same inputs, {gross['own_steps'] / tolerance(gross):.0f} times its tolerance of "
            f"{tolerance(gross):g}{_width(gross)} (far beyond rounding: flagged whatever the output shows); {off}; "
            f"{measured}; {counted}",
            layer=gross["layer"],
            effects=recorded,
        )
    if decided == "beyond":
        lost = f"the NPU path loses accuracy the quantized model does not: {measured}"
        if broken is not None:
            before = [layer for layer in layers[: layers.index(broken)] if layer["partition"] == broken["partition"]]
            inputs = max((layer["accumulated_steps"] for layer in before), default=0)
            return Check(
                "lowering",
                "flagged",
                f"{lost}; it starts at layer {_layer_label(broken)}, {broken['own_steps']} steps off given the same "
                f"inputs (> {tolerance(broken):g}{_width(broken)}; the layers before it within {inputs}); {off}; "
                f"{counted}" + _int16_hint(broken, tolerance(broken)),
                layer=broken["layer"],
                effects=recorded,
            )
        if layers and not beyond and not unpaired:
            grows, growth = _fastest_drift(layers)
            return Check(
                "lowering",
                "flagged",
                f"{lost}; every layer is within its tolerance on its own, and the drift grows most at layer "
                f"{_layer_label(grows)} (+{growth} steps); {off}; {counted}",
                layer=grows["layer"],
                effects=recorded,
            )
        return Check(
            "lowering",
            "flagged",
            f"{lost}; {off}; the layer where it starts could not be found: {_not_found(location, beyond, unpaired)} "
            f"({counted})",
            effects=recorded,
        )
    steps = (
        f"the NPU path within {max_steps:g} output step(s) of the quantized model on {samples} samples"
        if within_steps
        else off
    )
    note = ""
    if beyond and not within_steps:
        more = f" (and {len(beyond) - 1} more)" if beyond[1:] else ""
        note = f"; note: {_layer_note(beyond[0], tolerance(beyond[0]))}{more}"
    if decided == "within" and effects:
        return Check(
            "lowering", "ok", f"ok, shown within tolerance: {measured}; {steps}{note}{unseen}", effects=recorded
        )
    if not effects and within_steps:
        # nothing to weigh against float (no per-sample errors): the outputs' own steps are all there is
        return Check("lowering", "inconclusive", f"{steps}, but no per-sample error against float was measured{unseen}")
    return Check(
        "lowering",
        "inconclusive",
        f"whether the NPU path loses accuracy the quantized model does not is not shown either way: {measured}; "
        f"{would_decide(needed)}; {steps}{note}{unseen}",
        effects=recorded,
        more_samples=needed,
    )


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


def accuracy_effects(metrics: dict, thresholds: Thresholds, classifier: bool) -> list[Effect]:
    """What the accuracy check weighs: top-1 agreement with float (a classifier by evidence, on the
    decidable samples), else the cosine and the relative error of the NPU path against float."""
    if classifier:
        agreed, decided = metrics.get("agreement_decidable_count"), metrics.get("decidable_samples") or 0
        if agreed is None or not decided:
            return []
        interval = wilson(agreed, decided)
        return [Effect("top-1 agreement with float ", interval, thresholds.min_agreement, "below", decimals=3)]
    sums = metrics.get("against_float_sums")
    if not sums or not sum(sums.get("ref_ref") or []):
        return []
    effects = [Effect("cosine with float ", bootstrap(cosine_of, sums), thresholds.min_cosine, "below", decimals=4)]
    if metrics.get("relative_error_npu_vs_float") is not None:  # not at noise scale (see against_float)
        interval = bootstrap(relative_error_of, sums)
        effects.append(
            Effect("relative error against float ", interval, thresholds.max_relative_error, "above", decimals=3)
        )
    return effects


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
    untrained = f"; {weights_untrained}" if weights_untrained else ""
    if not classifier and metrics.get("reference_all_zero"):
        return Check(
            "accuracy",
            "inconclusive",
            f"the float outputs are all below one output step (at most {metrics['float_output_max_abs']:.2g}): "
            f"nothing to compare against{untrained}",
        )
    effects = accuracy_effects(metrics, thresholds, classifier)
    decided, needed = decide(effects)
    measured = "; ".join(e.text() for e in effects)
    recorded = [e.as_dict() for e in effects]
    if classifier and not effects:
        flat = f"{metrics.get('decidable_samples')} of {metrics.get('samples')} samples have a float top-1 margin"
        why = f"top-1 agreement not judged: logits too flat for top-1 to mean anything ({flat} of at least one step)"
        return Check("accuracy", "inconclusive", why + untrained)
    if has_data == "random":
        # calibrated and evaluated on random inputs of one distribution (`dataset: random`): a model
        # with random weights, or without real data; its loss against float on such inputs measures
        # no accuracy, so it is said, not judged (the lowering check answers for the NPU)
        return Check(
            "accuracy",
            NOT_JUDGED,
            f"not judged against float: on random inputs (dataset: random) the loss against float measures no "
            f"accuracy ({measured}{'; ' + where if where and decided != 'within' else ''})",
            effects=recorded,
        )
    if decided == "within":
        return Check("accuracy", "ok", f"shown within tolerance: {measured}", effects=recorded)
    if decided == "beyond":
        return _judged(f"{measured}{'; ' + where if where else ''}", weights_untrained, has_data, worst_layer, recorded)
    flat = ""
    if classifier and (metrics.get("decidable_samples") or 0) < (metrics.get("samples") or 0) / 2:
        flat = "; logits too flat for top-1 to mean much (most samples' float top-1 margin under one step)"
    return Check(
        "accuracy",
        "inconclusive",
        f"not shown either way: {measured}; {would_decide(needed)}{flat}{untrained}",
        effects=recorded,
        more_samples=needed,
    )


def _judged(
    detail: str, weights_untrained: str, has_data: bool | str, worst_layer: dict | None, effects: list
) -> Check:
    """A check shown beyond its tolerance: flagged where real data show it, at the layer that loses most."""
    if not has_data:
        untrained = f"; and {weights_untrained}" if weights_untrained else ""
        return Check(
            "accuracy",
            "inconclusive",
            f"{detail}; but without a dataset the model was calibrated on its example inputs alone and "
            f"evaluated on random inputs{untrained}: give it a `dataset` to judge its accuracy",
            effects=effects,
        )
    if not worst_layer:
        return Check("accuracy", "inconclusive", f"{detail}; no layer could be named", effects=effects)
    return Check("accuracy", "flagged", detail, layer=worst_layer["layer"], effects=effects)


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

    A classifier needs enough for top-1 agreement to be shown within min_agreement (see
    Thresholds.samples_to_draw).
    Otherwise the cosine and the relative error are computed over every output value of every
    sample: with N values, the relative error's own relative standard error is about 1/sqrt(2N),
    so 400 values keep it within ~3.5 %.
    """
    if classifier:
        needed = thresholds.samples_to_draw()
        why = f"{needed} for top-1 agreement to be shown within {thresholds.min_agreement:g} (Wilson's interval)"
    else:
        needed = math.ceil(400 / max(1, values_per_sample))
        why = f"{needed} for 400 output values ({values_per_sample} per sample) behind the cosine and relative error"
    count = min(cap, max(minimum, needed))
    if count < needed:
        why += f", capped at {cap}"
    return count, why
