"""What one compile stage writes and a later one reads: the loaders and the sample sets they share.

A stage never imports another stage (so editing one reruns only its own jobs): what two stages
both need lives here, below them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ethosweep.zoo.datasets import load_splits
from ethosweep.zoo.inputs import random_inputs_like


def load_tensors(path: str | Path) -> tuple:
    """Inputs or reference outputs written by the export stage."""
    return tuple(torch.load(path, weights_only=True))


def load_quantized(path: str):
    """Load a quantized program written by the quantize stage (in any process)."""
    # Deserialising needs the quantized_decomposed ops registered; the Arm
    # quantizer package registers them.
    import executorch.backends.arm.quantizer  # noqa: F401

    return torch.export.load(path)


def load_edge(path: str):
    """The edge program the lower stage wrote (delegates carrying TOSA), in any process."""
    import executorch.backends.arm.quantizer  # noqa: F401 - registers the quantized_decomposed ops
    from executorch.exir.serde.serialize import load

    return load(path)


# `dataset: random`: no real data, but inputs of the distribution the model is evaluated on
# (uniform in its example inputs' value range), calibration and evaluation drawn apart (seeds).
RANDOM = "random"


@dataclass(frozen=True)
class Calibration:
    """What a quantizer calibrates on (the quantize and Cortex-M stages'): the model's data (or random
    inputs), how many samples, the seed."""

    dataset: Any = None
    calibration_samples: int = 100
    seed: int = 0


def calibration_set(example_inputs: tuple, dataset, samples: int, seed: int) -> tuple[list[tuple], str]:
    """The calibration inputs: the dataset's calibration split, `samples` random inputs in the example
    inputs' range (`dataset: random`), or (as aot_arm_compiler does without --calibration_data)
    the example inputs alone."""
    if dataset is None:
        return [example_inputs], "the example inputs"
    if dataset == RANDOM:
        drawn = random_inputs_like(example_inputs, samples, seed + 3)
        return drawn, f"{samples} random inputs in the example inputs' value range (dataset: random)"
    splits = load_splits(dataset, example_inputs, seed)
    return splits.calibration(samples), f"{min(samples, len(splits.train_x))} samples of {splits.source}"


def evaluation_set(example_inputs: tuple, dataset, seed: int, evaluation_samples: int, random_samples: int):
    """(list of input tuples, labels or None, description); `random_samples` inputs without a dataset."""
    if dataset is not None and dataset != RANDOM:
        splits = load_splits(dataset, example_inputs, seed)
        x, y = splits.evaluation(evaluation_samples)
        return [(s.unsqueeze(0),) for s in x], y, f"{len(x)} held-out samples of {splits.source}"
    # No data: random inputs spanning each example input's value range (seeded).
    samples = [example_inputs, *random_inputs_like(example_inputs, max(0, random_samples - 1), seed + 1)]
    calibrated = "calibrated on others of the kind" if dataset == RANDOM else "no dataset"
    return samples, None, f"the example inputs and {len(samples) - 1} random inputs in their value range ({calibrated})"
