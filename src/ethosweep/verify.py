"""Stage: verify the numerics of a quantized, lowered model on real data, before any firmware.

For every evaluation sample it runs
- the float model (the exported program),
- the quantized model in PyTorch (quantize/dequantize simulated in float: the int reference),
- the model as the NPU computes it: the lowered graph, with each delegated partition run
  by the TOSA reference model (tosa-tools' `tosa_reference_model`, the functional
  specification of what the NPU computes) and the CPU-side operators (quantize,
  dequantize, operators the NPU cannot run) run by PyTorch,
and compares them: top-1 accuracy (with labels), top-1 agreement, the error between the
NPU path and the quantized model in output quantization steps (ExecuTorch's own tests
require at most 1), cosine similarity and SNR against float, and per-layer SNR of the
quantized model against float to locate where accuracy is lost.

Keyed by (model, scheme, TOSA profile), like the lower stage whose edge program it runs:
the TOSA the NPU runs depends on nothing else (Vela compiles it per cell, but the graph it
compiles is the same); each partition's sha256 is recorded and the summary checks it
against the TOSA every cell's .pte was compiled from.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
import os
import sys
import time
from collections import defaultdict

import numpy as np
import torch
import torch.utils._pytree as pytree

from ethosweep.datasets import load_splits
from ethosweep.export import load_tensors
from ethosweep.integrity import verify as verify_artifact
from ethosweep.io import atomic_write_bytes, read_json, write_json
from ethosweep.lower import load_edge
from ethosweep.provenance import tool_versions
from ethosweep.quantize import load_quantized

log = logging.getLogger(__name__)


class NpuInterpreter(torch.fx.Interpreter):
    """Runs a lowered graph with each delegate executed by the TOSA reference model."""

    def call_function(self, target, args, kwargs):
        if target is torch.ops.higher_order.executorch_call_delegate:
            lowered, *inputs = args
            return run_tosa(lowered.processed_bytes, inputs)
        return super().call_function(target, args, kwargs)


def run_tosa(tosa: bytes, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    import tosa_reference_model as reference

    arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    with _quiet_c_output():  # the library prints a version notice to stdout on every run
        outputs, status = reference.run(tosa, arrays, verbosity="NONE", initialize_variable_tensor_from_numpy=True)
    if status != reference.GraphStatus.TOSA_VALID:
        raise RuntimeError(f"the TOSA reference model rejected the partition: {status}")
    return tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in outputs)


@contextlib.contextmanager
def _quiet_c_output():
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def tosa_partitions(graph_module) -> list[bytes]:
    return [getattr(graph_module, n.target).processed_bytes for n in graph_module.graph.nodes
            if n.op == "get_attr" and n.target.startswith("lowered_module")]


def output_scales(graph_module) -> list[float | None]:
    """The quantization step of each graph output (the scale of the dequantize producing it)."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    scales = []
    for arg in pytree.tree_leaves(output.args[0]):
        is_dequant = isinstance(arg, torch.fx.Node) and "dequantize_per_tensor" in str(arg.target)
        scales.append(float(arg.args[1]) if is_dequant else None)
    return scales


def flat(outputs) -> list[torch.Tensor]:
    return [t.detach().float() for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def evaluation_set(example_inputs: tuple, dataset, seed: int, evaluation_samples: int, random_samples: int):
    """(list of input tuples, labels or None, description)."""
    if dataset is not None:
        splits = load_splits(dataset, example_inputs, seed)
        x, y = splits.evaluation(evaluation_samples)
        return [(s.unsqueeze(0),) for s in x], y, f"{len(x)} held-out samples of {splits.source}"
    # No data: random inputs spanning each example input's value range (seeded).
    generator = torch.Generator().manual_seed(seed + 1)
    samples = [example_inputs]
    for _ in range(max(0, random_samples - 1)):
        samples.append(tuple(_random_like(t, generator) for t in example_inputs))
    return samples, None, f"the example inputs and {len(samples) - 1} random inputs in their value range (no dataset)"


def _random_like(t: torch.Tensor, generator) -> torch.Tensor:
    if not t.dtype.is_floating_point:
        return t.clone()
    low, high = float(t.min()), float(t.max())
    return (torch.rand(t.shape, generator=generator) * (high - low) + low).to(t.dtype)


class LayerRecorder(torch.fx.Interpreter):
    """Records every floating-point value the graph computes, by node name."""

    def __init__(self, module):
        super().__init__(module)
        self.outputs: dict[str, torch.Tensor] = {}

    def run_node(self, n):
        result = super().run_node(n)
        if isinstance(result, torch.Tensor) and result.is_floating_point():
            # a copy: later in-place operators (relu_, hardtanh_) would change a view
            self.outputs[n.name] = result.detach().flatten().clone()
        return result


def snr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    noise = float(((test - reference) ** 2).sum())
    signal = float((reference ** 2).sum())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    denominator = float(a.norm() * b.norm())
    return float(a @ b) / denominator if denominator else 1.0


def layer_report(float_module, quant_module, samples: list[tuple], limit: int = 32) -> list[dict]:
    """Per-layer SNR of the quantized model against float, in graph order, and the SNR each layer loses.

    A layer's loss is the SNR of the activations it receives in the quantized model (after
    their quantization) minus the SNR of what it produces: where it is large, that layer is
    where accuracy goes. The model's inputs get an entry of their own ("x (input
    quantization)"), whose loss is measured from the SNR an ideal quantizer of that width
    reaches (6.02 dB per bit + 1.76 dB): a badly calibrated input range shows up there.
    """
    ideal = 6.02 * _activation_bits(quant_module) + 1.76
    recorded_float, recorded_quant = defaultdict(list), defaultdict(list)
    for sample in samples[:limit]:
        for module, store in ((float_module, recorded_float), (quant_module, recorded_quant)):
            recorder = LayerRecorder(module)
            recorder.run(*sample)
            for name, value in recorder.outputs.items():
                store[name].append(value)
    joined = lambda store, name: torch.cat(store[name]) if name in store else None  # noqa: E731
    quant_nodes = {n.name: n for n in quant_module.graph.nodes}
    folded = _batch_norms_folded_away(float_module, quant_nodes)

    layers, seen_inputs = [], set()
    for node in float_module.graph.nodes:
        twin = quant_nodes.get(node.name)
        if node.op != "call_function" or twin is None:
            continue
        # The quantizer folds batch norms into the convolution before them: compare the
        # quantized convolution with the float batch norm's output.
        reference, test = joined(recorded_float, folded.get(node.name, node.name)), joined(recorded_quant, node.name)
        if reference is None or test is None or reference.shape != test.shape:
            continue
        output_snr = snr_db(reference, test)
        input_snrs = []
        for float_in, quant_in in zip(node.all_input_nodes, twin.all_input_nodes):
            if float_in.op == "get_attr":  # a weight, not an activation
                continue
            a, b = joined(recorded_float, float_in.name), joined(recorded_quant, quant_in.name)
            if a is not None and b is not None and a.shape == b.shape:
                input_snrs.append(snr_db(a, b))
        received = min(input_snrs) if input_snrs else math.inf
        for float_in, quant_in in zip(node.all_input_nodes, twin.all_input_nodes):
            if float_in.op == "placeholder" and float_in.name not in seen_inputs:
                seen_inputs.add(float_in.name)
                a, b = joined(recorded_float, float_in.name), joined(recorded_quant, quant_in.name)
                if a is not None and b is not None and a.shape == b.shape:
                    snr = snr_db(a, b)
                    layers.append({"layer": f"{float_in.name} (input quantization)", "snr_db": _finite(snr),
                                   "input_snr_db": None, "snr_drop_db": _finite(ideal - snr)})
        loss = received - output_snr if math.isfinite(output_snr) else None
        if loss is not None and not math.isfinite(received):
            loss = None
        layers.append({"layer": node.name, "snr_db": _finite(output_snr), "input_snr_db": _finite(received),
                       "snr_drop_db": _finite(loss)})
    return layers


def _batch_norms_folded_away(float_module, quant_nodes: dict) -> dict[str, str]:
    """float node name -> the name of the batch norm folded into it in the quantized graph."""
    folded = {}
    for node in float_module.graph.nodes:
        users = list(node.users)
        if len(users) == 1 and "batch_norm" in str(users[0].target) and users[0].name not in quant_nodes:
            folded[node.name] = users[0].name
    return folded


def _activation_bits(quant_module) -> int:
    """8 for int8 activations, 16 for int16 (a16w8): the width of the first quantize op."""
    for node in quant_module.graph.nodes:
        if node.op == "call_function" and "quantize_per_tensor" in str(node.target) and "dequantize" not in str(node.target):
            return 16 if node.args[-1] == torch.int16 else 8
    return 8


def _finite(value):
    return None if value is None or not math.isfinite(value) else round(value, 3)


def verify_numerics(
    program: str,
    quantized: str,
    inputs: str,
    edge: str,
    lower_meta: str,
    report: str,
    bundle_io: str,
    dataset=None,
    seed: int = 0,
    evaluation_samples: int = 500,
    random_samples: int = 8,
    min_agreement: float = 0.99,
    max_error_steps: float = 1.0,
    bundle_samples: int = 4,
) -> dict:
    """Verify one (model, scheme, TOSA profile); write the metrics and the bundle's test data."""
    started = time.perf_counter()
    float_module = torch.export.load(program).module()
    quant_module = load_quantized(quantized).module()
    example_inputs = load_tensors(inputs)
    lowered = read_json(lower_meta)
    verify_artifact(edge, lowered["edge_bytes"], lowered["edge_sha256"], "the lower stage")
    npu_module = load_edge(edge).module()
    scales = output_scales(npu_module)
    samples, labels, described = evaluation_set(example_inputs, dataset, seed, evaluation_samples, random_samples)
    loaded_in = time.perf_counter() - started

    float_out, quant_out, npu_out = [], [], []
    with torch.no_grad():
        for sample in samples:
            float_out.append(flat(float_module(*sample)))
            quant_out.append(flat(quant_module(*sample)))
            npu_out.append(flat(NpuInterpreter(npu_module).run(*sample)))
    metrics = compare(float_out, quant_out, npu_out, scales, labels)
    with torch.no_grad():
        layers = layer_report(float_module, quant_module, samples)
    worst = sorted((l for l in layers if l["snr_drop_db"] is not None), key=lambda l: -l["snr_drop_db"])[:3]

    flags = []
    if metrics.get("agreement_npu_vs_float") is not None and metrics["agreement_npu_vs_float"] < min_agreement:
        flag = f"top-1 agreement with float {metrics['agreement_npu_vs_float']:.3f} < {min_agreement}"
        if metrics["float_output_max_abs"] < 1e-6:
            flag += (f" (the float model's outputs are all ~0, at most {metrics['float_output_max_abs']:.1e}, "
                     "so its top-1 is noise: untrained weights?)")
        flags.append(flag)
    if metrics.get("max_error_steps") is not None and metrics["max_error_steps"] > max_error_steps:
        flags.append(f"NPU (TOSA) differs from the quantized model by {metrics['max_error_steps']:.0f} "
                     f"output steps > {max_error_steps:g}")
    record = {
        "data": described,
        "samples": len(samples),
        "metrics": metrics,
        "flags": flags,
        "worst_layers": worst,
        "layers": layers,
        "tosa_partitions": [{"index": i, "tosa_sha256": hashlib.sha256(b).hexdigest()} for i, b in enumerate(tosa_partitions(npu_module))],
        "thresholds": {"min_agreement": min_agreement, "max_error_steps": max_error_steps},
        "seconds": {"load": round(loaded_in, 2), "total": round(time.perf_counter() - started, 2)},
        "versions": tool_versions(),
    }
    buffer = io.BytesIO()
    torch.save({"inputs": samples[:bundle_samples], "expected": [tuple(o) for o in quant_out[:bundle_samples]]}, buffer)
    atomic_write_bytes(bundle_io, buffer.getvalue())
    write_json(report, record)
    log.info("verified on %s in %.1f s: %s%s", described, record["seconds"]["total"],
             {k: v for k, v in metrics.items() if v is not None},
             f"; FLAGGED: {'; '.join(flags)}" if flags else "")
    return record


def compare(float_out, quant_out, npu_out, scales, labels) -> dict:
    """The verification metrics over all samples (primary output for top-1)."""
    primary = lambda outs: torch.stack([o[0].flatten() for o in outs])  # noqa: E731
    f, q, n = primary(float_out), primary(quant_out), primary(npu_out)
    classifier = f.shape[1] >= 2 and float_out[0][0].dim() == 2 and float_out[0][0].shape[0] == 1
    metrics: dict = {"classifier": classifier}
    if classifier:
        fp, qp, npp = f.argmax(1), q.argmax(1), n.argmax(1)
        metrics["agreement_npu_vs_float"] = float((npp == fp).float().mean())
        metrics["agreement_npu_vs_quantized"] = float((npp == qp).float().mean())
        if labels is not None:
            metrics["top1_float"] = float((fp == labels).float().mean())
            metrics["top1_quantized"] = float((qp == labels).float().mean())
            metrics["top1_npu"] = float((npp == labels).float().mean())
    steps = []
    for outputs_q, outputs_n in zip(quant_out, npu_out):
        for index, (a, b) in enumerate(zip(outputs_q, outputs_n)):
            if index < len(scales) and scales[index]:
                steps.append(((b - a).abs() / scales[index]).flatten())
    if steps:
        every = torch.cat(steps)
        metrics["max_error_steps"] = round(float(every.max()), 4)
        metrics["mean_error_steps"] = round(float(every.mean()), 6)
    all_float = torch.cat([t.flatten() for o in float_out for t in o])
    all_npu = torch.cat([t.flatten() for o in npu_out for t in o])
    metrics["float_output_max_abs"] = float(all_float.abs().max())
    metrics["cosine_npu_vs_float"] = round(cosine(all_float, all_npu), 6)
    metrics["snr_db_npu_vs_float"] = _finite(snr_db(all_float, all_npu))
    return metrics
