"""Where quantization loses accuracy: per-layer SNR of the quantized model against float.

The verify stage's layer table; the NPU path's own drift from the quantized model is `locate`'s.
"""

from __future__ import annotations

import functools
import math

import torch

from ethosweep.verify.metrics import finite


class LayerRecorder(torch.fx.Interpreter):
    """Records the floating-point values of the graph's nodes it is asked for (`names`; all when None)."""

    def __init__(self, module, names: set[str] | None = None):
        super().__init__(module)
        self.names = names
        self.outputs: dict[str, torch.Tensor] = {}

    def run_node(self, n):
        result = super().run_node(n)
        wanted = self.names is None or n.name in self.names
        if wanted and isinstance(result, torch.Tensor) and result.is_floating_point():
            # a copy: later in-place operators (relu_, hardtanh_) would change a view
            self.outputs[n.name] = result.detach().flatten().clone()
        return result


def layer_report(float_module, quant_module, samples: list[tuple], limit: int = 32) -> list[dict]:
    """Per-layer SNR of the quantized model against float, in graph order, and the SNR each layer loses.

    A layer's loss is the SNR of the activations it receives in the quantized model (after
    their quantization) minus the SNR of what it produces: where it is large, that layer is
    where accuracy goes. The model's inputs get an entry of their own ("x (input
    quantization)"), whose loss is measured from the SNR an ideal quantizer of that width
    reaches (6.02 dB per bit + 1.76 dB): a badly calibrated input range shows up there.
    Each SNR is summed over the first `limit` samples one sample at a time (a model's every
    activation on 32 samples at once would need gigabytes at 224x224).
    """
    ideal = 6.02 * _activation_bits(quant_module) + 1.76
    quant_nodes = {n.name: n for n in quant_module.graph.nodes}
    folded = _batch_norms_folded_away(float_module, quant_nodes)
    pairs = _compared_pairs(float_module, quant_nodes, folded)
    snr = functools.partial(_snr, _snr_sums(float_module, quant_module, samples[:limit], pairs))
    layers, seen_inputs = [], set()
    for node in float_module.graph.nodes:
        twin = quant_nodes.get(node.name)
        if node.op != "call_function" or twin is None:
            continue
        # The quantizer folds batch norms into the convolution before them: compare the
        # quantized convolution with the float batch norm's output.
        output_snr = snr(folded.get(node.name, node.name), node.name)
        if output_snr is None:
            continue
        inputs = list(zip(node.all_input_nodes, twin.all_input_nodes))
        input_snrs = [snr(a.name, b.name) for a, b in inputs if a.op != "get_attr"]  # a weight, not an activation
        input_snrs = [value for value in input_snrs if value is not None]
        received = min(input_snrs) if input_snrs else math.inf
        for float_in, quant_in in inputs:
            if float_in.op == "placeholder" and float_in.name not in seen_inputs:
                seen_inputs.add(float_in.name)
                layers += _input_quantization(float_in.name, snr(float_in.name, quant_in.name), ideal)
        loss = received - output_snr if math.isfinite(output_snr) else None
        if loss is not None and not math.isfinite(received):
            loss = None
        layers.append(
            {
                "layer": node.name,
                "snr_db": finite(output_snr),
                "input_snr_db": finite(received),
                "snr_drop_db": finite(loss),
            }
        )
    return layers


def _snr(energies: dict, reference: str, test: str) -> float | None:
    """The SNR in dB of `test` against `reference`, from their summed energies (None: not compared)."""
    sums = energies.get((reference, test))
    if sums is None:
        return None
    signal, noise = sums
    return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def _input_quantization(name: str, value: float | None, ideal: float) -> list[dict]:
    """A model input's own entry: its loss measured from what an ideal quantizer reaches."""
    if value is None:
        return []
    return [
        {
            "layer": f"{name} (input quantization)",
            "snr_db": finite(value),
            "input_snr_db": None,
            "snr_drop_db": finite(ideal - value),
        }
    ]


def _compared_pairs(float_module, quant_nodes: dict, folded: dict[str, str]) -> set[tuple[str, str]]:
    """(float node, quantized node) whose values layer_report compares: each layer's output (against
    the float batch norm folded into it) and each of its activation inputs."""
    pairs = set()
    for node in float_module.graph.nodes:
        twin = quant_nodes.get(node.name)
        if node.op != "call_function" or twin is None:
            continue
        pairs.add((folded.get(node.name, node.name), node.name))
        pairs.update((a.name, b.name) for a, b in zip(node.all_input_nodes, twin.all_input_nodes) if a.op != "get_attr")
    return pairs


def _snr_sums(float_module, quant_module, samples: list[tuple], pairs: set) -> dict[tuple, tuple[float, float]]:
    """(signal, noise) energy per compared pair, summed over the samples, one sample at a time; a pair
    whose two values differ in shape is not compared."""
    wanted_float, wanted_quant = {a for a, _ in pairs}, {b for _, b in pairs}
    sums: dict[tuple, list[float]] = {}
    mismatched: set[tuple] = set()
    for sample in samples:
        recorded_float, recorded_quant = (
            LayerRecorder(float_module, wanted_float),
            LayerRecorder(quant_module, wanted_quant),
        )
        recorded_float.run(*sample)
        recorded_quant.run(*sample)
        for pair in pairs:
            reference, test = recorded_float.outputs.get(pair[0]), recorded_quant.outputs.get(pair[1])
            if reference is None or test is None or pair in mismatched:
                continue
            if reference.shape != test.shape:
                mismatched.add(pair)
                continue
            reference, test = reference.double(), test.double()
            total = sums.setdefault(pair, [0.0, 0.0])
            total[0] += float((reference * reference).sum())
            total[1] += float(((test - reference) ** 2).sum())
    return {pair: tuple(total) for pair, total in sums.items() if pair not in mismatched}


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
        if (
            node.op == "call_function"
            and "quantize_per_tensor" in str(node.target)
            and "dequantize" not in str(node.target)
        ):
            return 16 if node.args[-1] == torch.int16 else 8
    return 8
