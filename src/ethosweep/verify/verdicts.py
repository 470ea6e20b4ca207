"""Two verdicts on a model's numerics, each a measured effect with its 95 % interval judged against a
tolerance and answered only as far as the evidence goes: the NPU's question (`npu`: does the NPU
path compute what the quantized model computes? identical, within tolerance, ok, flagged or
inconclusive) and the quantization's (`quantization`: what does quantization cost against float?
judged on representative data only). Torch-free: it works on the metrics the verify stage measured;
the method is in docs/numerics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ethosweep.verify.intervals import (
    COSINE_GAP_FLOOR,
    RELATIVE_ERROR_FLOOR,
    Effect,
    Interval,
    clopper_pearson,
    decide,
    geometric_mean,
    log_ratio_db,
    paired_difference,
    per_input_cosine_gaps,
    per_input_relative_errors,
    would_decide,
)
from ethosweep.verify.layer_notes import (
    Located,
    fastest_drift,
    gross,
    int16_hint,
    layer_label,
    layer_note,
    not_found,
    paired_layers,
    saturation,
    width,
)
from ethosweep.verify.tolerances import ENERGY_TOLERANCE_DB, Thresholds

# The NPU check's outcomes, best first; "not judged" (a check that measured what says nothing of its
# question: float on random inputs) is shown, never counted.
IDENTICAL, WITHIN, OK = "identical", "within tolerance", "ok"
FLAGGED, INCONCLUSIVE, NOT_JUDGED = "flagged", "inconclusive", "not judged"
PASSED = (IDENTICAL, WITHIN, OK)


@dataclass
class Check:
    name: str  # "npu" (the NPU path against the quantized model) or "quantization" (against float)
    verdict: str  # identical | within tolerance | ok | inconclusive | flagged | not judged
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
    npu: Check
    quantization: Check

    @property
    def checks(self) -> list[Check]:
        return [self.npu, self.quantization]

    def as_dict(self) -> dict:
        """The NPU's verdict as the record's own (verdict, reason, layer), the quantization's beside it."""
        return {
            "verdict": self.npu.verdict,
            "reason": self.npu.detail,
            "layer": self.npu.layer,
            "quantization": {
                "verdict": self.quantization.verdict,
                "reason": self.quantization.detail,
                "layer": self.quantization.layer,
            },
            "checks": [c.as_dict() for c in self.checks],
        }


def at_most_share(differing: int, samples: int) -> str:
    """'on at most 3.0 % of inputs (95 %, Clopper-Pearson)': the one-sided 95 % upper bound on the
    share of inputs on which something happens that happened on `differing` of `samples`."""
    high = clopper_pearson(differing, samples, 0.90).high
    return f"on at most {100 * high:.1f} % of inputs (95 %, Clopper-Pearson)"


def energy_effect(metrics: dict) -> Effect | None:
    """The NPU path's error energy against float over the quantized model's on a typical input (the
    geometric mean of the per-input ratios, each from the energy ExecuTorch's tolerance allows)."""
    energy = metrics.get("error_against_float") or {}
    per_sample = energy.get("per_sample") or {}
    npu, quantized = per_sample.get("npu"), per_sample.get("quantized")
    if not npu:
        return None
    floor = (energy.get("allowed_extra") or 0.0) / len(npu)
    return Effect(
        "the NPU path: ",
        log_ratio_db(npu, quantized, floor),
        ENERGY_TOLERANCE_DB,
        "above",
        " dB",
        " more error energy against float than the quantized model on a typical input",
    )


def top1_effect(metrics: dict, thresholds: Thresholds) -> Effect | None:
    pairs = metrics.get("top1_pairs")
    if not pairs or not sum(pairs.values()):
        return None
    return Effect(
        "the NPU path's top-1 agreement with float: ",
        paired_difference(pairs["both"], pairs["npu_only"], pairs["quantized_only"], pairs["neither"]),
        -(1 - thresholds.min_agreement),
        "below",
        " points",
        " against the quantized model's",
        scale=100,
    )


def npu_check(metrics: dict, location: dict | None, thresholds: Thresholds, classifier: bool) -> Check:
    """Does the NPU path compute what the quantized model computes? (see the module docstring)"""
    max_steps, samples = metrics.get("max_error_steps"), metrics.get("samples") or 0
    unseen = _unseen(metrics.get("uncompared_outputs") or [])
    if max_steps is None or max_steps == 0:
        return _no_difference(metrics, unseen)
    allowed = metrics.get("output_steps_allowed") or thresholds.max_error_steps
    differing = metrics.get("differing_samples", samples if max_steps else 0)
    beyond_steps = metrics.get("beyond_tolerance_samples", samples if max_steps > allowed else 0)
    located = paired_layers(location, thresholds)
    beyond, counted = located.beyond, located.counted
    tolerance = lambda layer: thresholds.steps_allowed(layer.get("bits", 8), layer.get("kind", ""))  # noqa: E731
    located_beyond = [layer for layer in beyond if not layer.get("unpaired_inputs")]
    far = next((x for x in located_beyond if gross(x, tolerance(x)) and not saturation(x, tolerance(x))), None)
    off = (
        f"the output is {max_steps:g} steps off the quantized model on {beyond_steps} of {samples} inputs "
        f"(ExecuTorch's Arm operator tests accept {allowed:g})"
    )
    effects = [e for e in (energy_effect(metrics), top1_effect(metrics, thresholds) if classifier else None) if e]
    decided, needed = decide(effects)
    measured = "; ".join(e.text() for e in effects) or "no per-sample errors against float to compare"
    recorded = [e.as_dict() for e in effects]
    if far is not None:
        return _computes_something_else(far, tolerance(far), f"{off}; {measured}; {counted}", recorded)
    if max_steps <= allowed:
        return Check(
            "npu",
            WITHIN,
            f"within {max_steps:g} output step(s) of the quantized model on all {samples} inputs, what ExecuTorch's "
            f"Arm tests accept ({allowed:g}; {differing} of the inputs differ at all); beyond it "
            f"{at_most_share(0, samples)}{unseen}",
        )
    if decided == "beyond":
        lost = f"the NPU path loses accuracy the quantized model does not: {measured}"
        return _flagged(lost, off, location, located, tolerance, recorded)
    note = _beyond_note(beyond, tolerance)
    if decided == "within" and effects:
        return Check(
            "npu",
            OK,
            f"ok, at no accuracy cost shown: {measured}; {off}, which its model tests accept where it costs no "
            f"accuracy{note}{unseen}",
            effects=recorded,
        )
    rare = (
        f"; within {max_steps:g} steps on all {samples} inputs, beyond {allowed:g} "
        f"{at_most_share(beyond_steps, samples)}"
        if beyond_steps < samples
        else ""
    )
    return Check(
        "npu",
        INCONCLUSIVE,
        f"{off}{rare}; whether it costs accuracy the quantized model does not lose is not shown either way: "
        f"{measured}; {would_decide(needed)}{note}{unseen}",
        effects=recorded,
        more_samples=needed,
    )


def _unseen(uncompared: list) -> str:
    if not uncompared:
        return ""
    return f"; output(s) {_indices(uncompared)} carry no quantization scale and were not compared in steps"


def _computes_something_else(layer: dict, tolerance: float, then: str, recorded: list[dict]) -> Check:
    """Flagged: a layer far beyond rounding given the NPU's own inputs, whatever the output shows."""
    return Check(
        "npu",
        FLAGGED,
        f"layer {layer_label(layer)} computes something else than the quantized model: {layer['own_steps']} "
        f"steps off given the same inputs, {layer['own_steps'] / tolerance:.0f} times its tolerance of "
        f"{tolerance:g}{width(layer)} (far beyond rounding: flagged whatever the output shows); {then}",
        layer=layer["layer"],
        effects=recorded,
    )


def _beyond_note(beyond: list[dict], tolerance) -> str:
    """The first layer beyond its tolerance, noted beside a verdict the output decides."""
    if not beyond:
        return ""
    more = f" (and {len(beyond) - 1} more)" if beyond[1:] else ""
    return f"; note: {layer_note(beyond[0], tolerance(beyond[0]))}{more}"


def _no_difference(metrics: dict, unseen: str) -> Check:
    """Nothing to compare in steps (no quantized output), or no step of difference on any input."""
    uncompared = metrics.get("uncompared_outputs") or []
    if metrics.get("max_error_steps") is None:
        return Check(
            "npu",
            INCONCLUSIVE,
            "nothing compared: no output of the model is quantized, so the NPU path could not be compared "
            "with the quantized model in steps" + (f" (outputs {_indices(uncompared)})" if uncompared else ""),
        )
    samples = metrics.get("samples") or 0
    return Check(
        "npu",
        IDENTICAL,
        f"identical to the quantized model on all {samples} inputs; it differs {at_most_share(0, samples)}" + unseen,
    )


def _flagged(lost: str, off: str, location: dict | None, located: Located, tolerance, recorded: list) -> Check:
    """A difference shown to cost accuracy: flagged where it starts, or where the drift grows most, or
    saying where it could not look."""
    layers, beyond, unpaired, counted = located.layers, located.beyond, located.unpaired, located.counted
    located_beyond = [x for x in beyond if not x.get("unpaired_inputs") and not saturation(x, tolerance(x))]
    broken = next(iter(located_beyond), None)
    if broken is not None:
        before = [layer for layer in layers[: layers.index(broken)] if layer["partition"] == broken["partition"]]
        inputs = max((layer["accumulated_steps"] for layer in before), default=0)
        return Check(
            "npu",
            FLAGGED,
            f"{lost}; it starts at layer {layer_label(broken)}, {broken['own_steps']} steps off given the same "
            f"inputs (> {tolerance(broken):g}{width(broken)}; the layers before it within {inputs}); {off}; "
            f"{counted}" + int16_hint(broken, tolerance(broken)),
            layer=broken["layer"],
            effects=recorded,
        )
    if layers and not beyond and not unpaired:
        grows, growth = fastest_drift(layers)
        return Check(
            "npu",
            FLAGGED,
            f"{lost}; every layer is within its tolerance on its own, and the drift grows most at layer "
            f"{layer_label(grows)} (+{growth} steps); {off}; {counted}",
            layer=grows["layer"],
            effects=recorded,
        )
    return Check(
        "npu",
        FLAGGED,
        f"{lost}; {off}; the layer where it starts could not be found: {not_found(location, beyond, unpaired)} "
        f"({counted})",
        effects=recorded,
    )


def _indices(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)


@dataclass(frozen=True)
class Evidence:
    """What the quantization check needs beyond the metrics: whether the data represent the model's
    inputs (True: a dataset; "random": `dataset: random`; False: none), why the weights look untrained,
    and the layer whose SNR against float drops most."""

    has_data: bool | str
    weights_untrained: str = ""
    worst_layer: dict | None = None


def quantization_effects(metrics: dict, thresholds: Thresholds, classifier: bool) -> list[Effect]:
    """What the quantization check weighs: top-1 agreement with float (a classifier by evidence, on the
    decidable samples), else the typical per-input cosine and relative error of the NPU path against float
    (ExecuTorch's thresholds judge each test input on its own)."""
    if classifier:
        agreed, decided = metrics.get("agreement_decidable_count"), metrics.get("decidable_samples") or 0
        if agreed is None or not decided:
            return []
        return [
            Effect(
                "top-1 agreement with float ",
                clopper_pearson(agreed, decided),
                thresholds.min_agreement,
                "below",
                decimals=3,
            )
        ]
    sums = metrics.get("against_float_sums")
    if not sums or not sum(sums.get("ref_ref") or []):
        return []
    gap = geometric_mean(per_input_cosine_gaps(sums), COSINE_GAP_FLOOR)
    cosine = Interval(1 - gap.estimate, 1 - gap.high, 1 - gap.low, gap.samples)
    effects = [Effect("cosine with float on a typical input ", cosine, thresholds.min_cosine, "below", decimals=4)]
    if metrics.get("relative_error_npu_vs_float") is not None:  # not at noise scale (see against_float)
        interval = geometric_mean(per_input_relative_errors(sums), RELATIVE_ERROR_FLOOR)
        effects.append(
            Effect(
                "relative error against float on a typical input ",
                interval,
                thresholds.max_relative_error,
                "above",
                decimals=3,
            )
        )
    return effects


def quantization_check(metrics: dict, thresholds: Thresholds, classifier: bool, evidence: Evidence) -> Check:
    """How much does quantization cost against float? Judged only on representative data (see the
    module docstring)."""
    where = _worst(evidence.worst_layer)
    untrained = f"; {evidence.weights_untrained}" if evidence.weights_untrained else ""
    if not classifier and metrics.get("reference_all_zero"):
        return Check(
            "quantization",
            INCONCLUSIVE,
            f"the float outputs are all below one output step (at most {metrics['float_output_max_abs']:.2g}): "
            f"nothing to compare against{untrained}",
        )
    effects = quantization_effects(metrics, thresholds, classifier)
    decided, needed = decide(effects)
    measured = "; ".join(e.text() for e in effects)
    recorded = [e.as_dict() for e in effects]
    if classifier and not effects:
        flat = f"{metrics.get('decidable_samples')} of {metrics.get('samples')} samples have a float top-1 margin"
        why = f"top-1 agreement not judged: logits too flat for top-1 to mean anything ({flat} of at least one step)"
        return Check("quantization", INCONCLUSIVE, why + untrained)
    if evidence.has_data is not True:
        # random inputs (`dataset: random`), or none (calibrated on the example inputs alone): what the
        # model loses against float there measures no accuracy, either way
        why = (
            "on random inputs (dataset: random)"
            if evidence.has_data == "random"
            else "without a dataset the model was calibrated on its example inputs alone and evaluated on random "
            "inputs: give it a `dataset` to judge its accuracy"
        )
        return Check(
            "quantization",
            NOT_JUDGED,
            f"not judged against float: {why} ({measured or 'nothing measured'}"
            f"{'; ' + where if where and decided != 'within' else ''}){untrained}",
            effects=recorded,
        )
    if decided == "within":
        return Check("quantization", OK, f"shown within tolerance: {measured}", effects=recorded)
    if decided == "beyond":
        detail = f"{measured}{'; ' + where if where else ''}"
        if not evidence.worst_layer:
            return Check("quantization", INCONCLUSIVE, f"{detail}; no layer could be named", effects=recorded)
        return Check("quantization", FLAGGED, detail, layer=evidence.worst_layer["layer"], effects=recorded)
    flat = ""
    if classifier and (metrics.get("decidable_samples") or 0) < (metrics.get("samples") or 0) / 2:
        flat = "; logits too flat for top-1 to mean much (most samples' float top-1 margin under one step)"
    return Check(
        "quantization",
        INCONCLUSIVE,
        f"not shown either way: {measured}; {would_decide(needed)}{flat}{untrained}",
        effects=recorded,
        more_samples=needed,
    )


def _worst(worst_layer: dict | None) -> str:
    if not worst_layer:
        return ""
    return (
        f"accuracy is lost most at {worst_layer['layer']} (its SNR against float falls by "
        f"{worst_layer['snr_drop_db']} dB, to {worst_layer['snr_db']} dB)"
    )


def judge(
    metrics: dict, location: dict | None, thresholds: Thresholds, classifier: bool, evidence: Evidence
) -> Verdict:
    return Verdict(
        npu_check(metrics, location, thresholds, classifier),
        quantization_check(metrics, thresholds, classifier, evidence),
    )


def random_samples_needed(minimum: int, classifier: bool, thresholds: Thresholds) -> tuple[int, str]:
    """How many random inputs a model without representative data is evaluated on, fixed before any is
    looked at: `numerics.random_samples`, or for a classifier the more that top-1 agreement needs to be
    shown within min_agreement if none disagrees (Thresholds.samples_to_draw)."""
    if classifier and thresholds.samples_to_draw() > minimum:
        needed = thresholds.samples_to_draw()
        return needed, f"{needed} for top-1 agreement to be shown within {thresholds.min_agreement:g} (Clopper-Pearson)"
    return minimum, f"{minimum} (numerics.random_samples, fixed before looking)"
