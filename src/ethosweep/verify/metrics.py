"""The verify stage's measurements: the three paths' outputs compared, over every sample.

Top-1 (a classifier's paired table of who agrees with float), the NPU path against the quantized
model in each output's own steps, and each path's error against float: the cosine and relative error
ExecuTorch's Arm tests compute, and the per-sample sums and energies the verdicts' intervals are made
of (ethosweep.verify.intervals, ethosweep.verify.verdicts). The outputs of each sample arrive as flat
float tensors (ethosweep.verify.reference.flat).
"""

from __future__ import annotations

import math

import torch
import torch.utils._pytree as pytree

from ethosweep.verify.layers import activation_bits, is_dequantize, is_quantize, layer_sources, operator_kind
from ethosweep.verify.tolerances import Thresholds


def output_scales(graph_module) -> list[float | None]:
    """The quantization step of each graph output (the scale of the dequantize producing it)."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    scales = []
    for arg in pytree.tree_leaves(output.args[0]):
        is_dequant = isinstance(arg, torch.fx.Node) and "dequantize_per_tensor" in str(arg.target)
        scales.append(float(arg.args[1]) if is_dequant else None)
    return scales


def output_tolerances(quant_module, thresholds: Thresholds) -> list[float]:
    """The steps each output may differ by: its width and the operator producing it decide
    (Thresholds.steps_allowed), read from the quantized graph (dequantize <- quantize <- layer)."""
    order = {n: i for i, n in enumerate(quant_module.graph.nodes)}
    output = next(n for n in quant_module.graph.nodes if n.op == "output")
    allowed = []
    for arg in pytree.tree_leaves(output.args[0]):
        producer = arg.args[0] if isinstance(arg, torch.fx.Node) and is_dequantize(arg) else None
        if isinstance(producer, torch.fx.Node) and is_quantize(producer) and layer_sources(producer):
            kind = operator_kind(sorted(layer_sources(producer), key=order.get))
            allowed.append(thresholds.steps_allowed(activation_bits(producer), kind))
        else:
            allowed.append(thresholds.max_error_steps)
    return allowed


def snr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    noise = float(((test - reference) ** 2).sum())
    signal = float((reference**2).sum())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    denominator = float(a.norm() * b.norm())
    return float(a @ b) / denominator if denominator else 1.0


def finite(value):
    return None if value is None or not math.isfinite(value) else round(value, 3)


def compare(float_out, quant_out, npu_out, scales, labels, classifier: bool, allowed: list | None = None) -> dict:
    """The verification metrics over all samples (the primary output for top-1). `allowed`: the
    steps each output may differ by (output_tolerances); the one of the output that is furthest off
    is recorded as `output_steps_allowed`."""
    primary = lambda outs: torch.stack([o[0].flatten() for o in outs])  # noqa: E731
    f, q, n = primary(float_out), primary(quant_out), primary(npu_out)
    metrics: dict = {"samples": len(float_out)}
    if classifier and f.shape[1] >= 2:
        metrics.update(_top1(f, q, n, scales, labels))
    per_sample, worst_output, worst_excess, beyond = [], None, -math.inf, 0
    for outputs_q, outputs_n in zip(quant_out, npu_out):
        worst, sample_excess = None, -math.inf
        for index, (a, b) in enumerate(zip(outputs_q, outputs_n)):
            if index < len(scales) and scales[index]:
                steps = float(((b - a).abs() / scales[index]).max())
                worst = steps if worst is None else max(worst, steps)
                excess = steps - (allowed[index] if allowed and index < len(allowed) else 1.0)
                sample_excess = max(sample_excess, excess)
                if excess > worst_excess:
                    worst_output, worst_excess = index, excess
        per_sample.append(worst)
        beyond += sample_excess > 0
    metrics["uncompared_outputs"] = [i for i in range(len(npu_out[0])) if i >= len(scales) or not scales[i]]
    measured = [s for s in per_sample if s is not None]
    if measured:
        metrics["max_error_steps"] = round(max(measured), 4)
        metrics["mean_error_steps"] = round(sum(measured) / len(measured), 6)
        metrics["worst_sample"] = max(range(len(per_sample)), key=lambda i: per_sample[i] or 0)
        # on how many inputs the NPU path differs from the quantized model at all, and beyond its tolerance
        metrics["differing_samples"] = sum(1 for steps in measured if steps > 0)
        metrics["beyond_tolerance_samples"] = beyond
        if allowed and worst_output is not None and worst_output < len(allowed):
            metrics["output_steps_allowed"] = allowed[worst_output]
    all_float = torch.cat([t.flatten() for o in float_out for t in o])
    all_npu = torch.cat([t.flatten() for o in npu_out for t in o])
    metrics["float_output_max_abs"] = float(all_float.abs().max())
    metrics.update(against_float(float_out, npu_out, scales))
    metrics["against_float_sums"] = against_float_sums(float_out, npu_out, scales)
    metrics["snr_db_npu_vs_float"] = finite(snr_db(all_float, all_npu))
    quantized = against_float(float_out, quant_out, scales)
    metrics["cosine_quantized_vs_float"] = quantized["cosine_npu_vs_float"]
    metrics["relative_error_quantized_vs_float"] = quantized["relative_error_npu_vs_float"]
    metrics["error_against_float"] = error_against_float(float_out, quant_out, npu_out, scales, allowed)
    return metrics


def _top1(f: torch.Tensor, q: torch.Tensor, n: torch.Tensor, scales, labels) -> dict:
    """A classifier's top-1 agreement between the paths, on the samples whose top-1 is decidable."""
    top1: dict = {}
    fp, qp, npp = f.argmax(1), q.argmax(1), n.argmax(1)
    top1["agreement_npu_vs_float"] = float((npp == fp).float().mean())
    top1["agreement_npu_vs_quantized"] = float((npp == qp).float().mean())
    # a sample decides top-1 only if float's margin is at least one output step (numerics module)
    top2 = f.topk(2, dim=1).values
    step = scales[0] if scales and scales[0] else 0.0
    decidable = (top2[:, 0] - top2[:, 1]) >= step
    top1["decidable_samples"] = int(decidable.sum())
    top1["agreement_decidable"] = float((npp == fp)[decidable].float().mean()) if decidable.any() else None
    top1["agreement_decidable_count"] = int(((npp == fp) & decidable).sum())
    # the decidable samples by which paths agree with float: the paired table the lowering
    # check's interval is computed from (ethosweep.verify.verdicts)
    npu_agrees, quantized_agrees = (npp == fp) & decidable, (qp == fp) & decidable
    top1["top1_pairs"] = {
        "both": int((npu_agrees & quantized_agrees).sum()),
        "npu_only": int((npu_agrees & ~quantized_agrees).sum()),
        "quantized_only": int((quantized_agrees & ~npu_agrees).sum()),
        "neither": int((decidable & ~npu_agrees & ~quantized_agrees).sum()),
    }
    if labels is not None:
        top1["top1_float"] = float((fp == labels).float().mean())
        top1["top1_quantized"] = float((qp == labels).float().mean())
        top1["top1_npu"] = float((npp == labels).float().mean())
    return top1


def error_against_float(float_out, quant_out, npu_out, scales, allowed: list | None = None) -> dict:
    """The NPU path's and the quantized model's error energy against float (sums of squared
    differences over every output value), the paired per-sample difference's standard error, and the
    extra energy ExecuTorch's output tolerance allows the NPU (its `allowed` steps at every value of
    a quantized output): what the NPU check weighs (ethosweep.verify.verdicts.energy_effect)."""
    npu, quantized, signal, extra = [], [], 0.0, 0.0
    for outputs_f, outputs_q, outputs_n in zip(float_out, quant_out, npu_out):
        npu.append(sum(float(((n.double() - f.double()) ** 2).sum()) for f, n in zip(outputs_f, outputs_n)))
        quantized.append(sum(float(((q.double() - f.double()) ** 2).sum()) for f, q in zip(outputs_f, outputs_q)))
        signal += sum(float((f.double() ** 2).sum()) for f in outputs_f)
        for index, f in enumerate(outputs_f):
            if index < len(scales) and scales[index]:
                steps = allowed[index] if allowed and index < len(allowed) else 1.0
                extra += f.numel() * (steps * scales[index]) ** 2
    decibels = lambda noise: None if noise == 0 else finite(10 * math.log10(signal / noise)) if signal else None  # noqa: E731
    return {
        "samples": len(npu),
        "npu": sum(npu),
        "quantized": sum(quantized),
        "allowed_extra": extra,
        "snr_db_npu": decibels(sum(npu)),
        "snr_db_quantized": decibels(sum(quantized)),
        # each sample's energies: the NPU check's interval is computed from them
        "per_sample": {"npu": [_significant(v) for v in npu], "quantized": [_significant(v) for v in quantized]},
    }


def _significant(value: float) -> float:
    """Nine significant digits: enough for any interval, a smaller record."""
    return float(f"{value:.9g}")


def against_float_sums(float_out, npu_out, scales) -> dict:
    """Per sample, the sums the cosine and the relative error against float are made of (against_float's
    cleaned reference r, the NPU path's o): r.o, r.r, o.o, (o-r).(o-r); the quantization check's
    per-input cosine and relative error are made of them (ethosweep.verify.intervals)."""
    sums: dict[str, list[float]] = {"ref_out": [], "ref_ref": [], "out_out": [], "diff_diff": []}
    for outputs_f, outputs_n in zip(float_out, npu_out):
        totals = dict.fromkeys(sums, 0.0)
        for index, (a, b) in enumerate(zip(outputs_f, outputs_n)):
            step = scales[index] if index < len(scales) and scales[index] else 0.0
            r = torch.where(a.abs() >= step, a, torch.zeros_like(a)).flatten().double()
            o = b.flatten().double()
            totals["ref_out"] += float(r @ o)
            totals["ref_ref"] += float(r @ r)
            totals["out_out"] += float(o @ o)
            totals["diff_diff"] += float((o - r) @ (o - r))
        for key, value in totals.items():
            sums[key].append(_significant(value))
    return sums


def against_float(float_out, npu_out, scales) -> dict:
    """Cosine and relative error (Frobenius) of the NPU path against float, as ExecuTorch's Arm tests
    compute them for quantized models (compare_rel_frobenius_and_cosine_similarity): float values
    below one output step count as 0; an all-0 reference is not judged; the relative error is not
    judged when the reference's norm is at quantization-noise scale (step * sqrt(values))."""
    reference, test, floor = [], [], 0.0
    for outputs_f, outputs_n in zip(float_out, npu_out):
        for index, (a, b) in enumerate(zip(outputs_f, outputs_n)):
            step = scales[index] if index < len(scales) and scales[index] else 0.0
            reference.append(torch.where(a.abs() >= step, a, torch.zeros_like(a)).flatten())
            test.append(b.flatten())
            floor = max(floor, step)
    ref, out = torch.cat(reference).double(), torch.cat(test).double()
    if not bool(ref.count_nonzero()):
        return {"reference_all_zero": True, "cosine_npu_vs_float": None, "relative_error_npu_vs_float": None}
    norm = float(ref.norm())
    relative = float((out - ref).norm()) / norm if norm > floor * math.sqrt(ref.numel()) else None
    return {
        "reference_all_zero": False,
        "cosine_npu_vs_float": round(cosine(ref, out), 6),
        "relative_error_npu_vs_float": None if relative is None else round(relative, 6),
    }
