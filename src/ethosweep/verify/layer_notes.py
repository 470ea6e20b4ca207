"""How the verdicts read the layer-by-layer comparison (ethosweep.verify.locate): the layers judged,
those beyond their tolerance, the one grossly off, the notes that name a layer and why it is off."""

from __future__ import annotations

from dataclasses import dataclass

from ethosweep.verify.tolerances import GROSS_FACTOR, GROSS_FLOOR_INT8_STEPS, Thresholds


@dataclass(frozen=True)
class Located:
    """The layer-by-layer comparison as the NPU check reads it: the judged layers (a decomposed operator
    at its last activation), those beyond their tolerance, the unpaired activations, how many paired."""

    layers: list
    beyond: list
    unpaired: list
    counted: str


def paired_layers(location: dict | None, thresholds: Thresholds) -> Located:
    located = bool(location and not location.get("problem") and location.get("layers"))
    paired = sorted(location["layers"], key=lambda layer: layer.get("order", 0)) if located else []
    unpaired = (location or {}).get("unpaired") or []
    counted = f"{len(paired)} of {len(paired) + len(unpaired)} activations paired with the NPU's tensors"
    layers = [layer for layer in paired if not layer.get("internal")]
    beyond = [
        layer
        for layer in layers
        if layer["own_steps"] > thresholds.steps_allowed(layer.get("bits", 8), layer.get("kind", ""))
    ]
    return Located(layers, beyond, unpaired, counted)


def gross(layer: dict, allowed: float) -> bool:
    steps = layer["own_steps"]
    int8_steps = steps / 256 if layer.get("bits") == 16 else steps
    return steps > GROSS_FACTOR * allowed and int8_steps >= GROSS_FLOOR_INT8_STEPS


def saturation(layer: dict, allowed: float) -> str:
    """Why a layer is off given its inputs, where the quantized model's clamp of an activation before it
    accounts for it: ExecuTorch adds an a16w8 residual sum on in int32, so the NPU never clamps it.
    The NPU then computes the sum the model means, and the output decides the verdict (not a flag)."""
    inputs, whole = layer.get("saturated_inputs"), layer.get("unsaturated_steps")
    if not inputs or whole is None or whole > allowed:
        return ""
    width = "int16 " if layer.get("bits") == 16 else ""
    return (
        f"layer {layer_label(layer)} is {layer['own_steps']} {width}steps off given its inputs: on this input the "
        f"quantized model clamps {', '.join(inputs)} to {width or 'its '}range, which the NPU carries on unclamped "
        f"(in int32); given {'them' if inputs[1:] else 'it'} unclamped, the layer is {whole} {width}step(s) off"
    )


def layer_note(layer: dict, allowed: float) -> str:
    """'layer add_1 (add, norm): 413 int16 steps off given its inputs, beyond the 400 ExecuTorch's a16w8
    layer_norm tests accept (at epsilon 2^-16)'"""
    if saturated := saturation(layer, allowed):
        return saturated
    width = "int16 " if layer.get("bits") == 16 else ""
    epsilon = " (at the quantizer's epsilon 2^-16)" if layer.get("bits") == 16 and allowed > 1 else ""
    return (
        f"layer {layer_label(layer)} is {layer['own_steps']} {width}steps off given its inputs, beyond the "
        f"{allowed:g} ExecuTorch's {'a16w8 ' if layer.get('bits') == 16 else ''}{layer.get('kind') or 'operator'} "
        f"tests accept{epsilon}"
    )


def not_found(location: dict | None, beyond: list[dict], unpaired: list[dict]) -> str:
    if not location or location.get("problem") or not location.get("layers"):
        return (location or {}).get("problem") or "no layer-by-layer comparison"
    if beyond:
        layer = beyond[0]
        return (
            f"layer {layer_label(layer)} is {layer['own_steps']} steps off given its inputs, but activations "
            f"before it could not be paired with the NPU's tensors ({', '.join(layer['unpaired_inputs'])}): the "
            "error may start there"
        )
    return f"every paired layer is within its tolerance; the error may be in {unpaired_summary(unpaired)}"


def int16_hint(layer: dict, allowed: float) -> str:
    """For an int16 table lookup or normalisation beyond ExecuTorch's tolerance: what that tolerance
    assumed, and how to accept the difference."""
    if layer.get("bits") != 16 or allowed <= 1:
        return ""
    return (
        f"; ExecuTorch's own a16w8 {layer.get('kind')} tests accept {allowed:g} with the quantizer's epsilon at "
        "2^-16, finer than its default 2^-12 (aot_arm_compiler's, and this sweep's), which leaves small tensors "
        f"such as a variance few int16 levels; to accept it, raise numerics.max_error_steps_int16.{layer.get('kind')}"
    )


def width(layer: dict) -> str:
    return f" int16 steps for {layer.get('kind') or 'this operator'}" if layer.get("bits") == 16 else ""


def fastest_drift(layers: list[dict]) -> tuple[dict | None, int]:
    """The layer whose accumulated difference grows most over the largest before it (its partition);
    (None, 0) when there is none."""
    best, growth = (layers[-1] if layers else None), -1
    for i, layer in enumerate(layers):
        before = [x["accumulated_steps"] for x in layers[:i] if x["partition"] == layer["partition"]]
        grown = layer["accumulated_steps"] - max(before, default=0)
        if grown > growth:
            best, growth = layer, grown
    return best, max(growth, 0)


def unpaired_summary(unpaired: list[dict]) -> str:
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


def layer_label(layer: dict) -> str:
    module = f", {layer['module']}" if layer.get("module") else ""
    uncertain = "; pairing not certain: another TOSA tensor is about as close" if layer.get("uncertain") else ""
    return f"{layer['layer']} ({layer['ops']}{module}{uncertain})"
