"""Real data for calibration, training and evaluation.

A model's `dataset` is a built-in one or the user's files:

- `digits`: scikit-learn's bundled handwritten digits (1797 images of 8x8 pixels, labels 0-9),
  the only real image data obtainable offline. Pixels are scaled to [0, 1] and resized
  (bilinear) to the model's input size; a 3-channel model gets the image in every channel;
  a model with a flat input of 64 features gets the 64 pixels.
- `{path: file.npz}`: arrays `inputs` (N, ...) and optional `labels` (N,).
- `{path: file.pt}`: a tensor (N, ...) or a dict with `inputs` and optional `labels`.
- `{path: folder/}`: one sample per `.pt` or `.npz` file (a tensor, or a tuple whose first
  element is the input), like aot_arm_compiler's --calibration_data; no labels.

The samples are split once, with a seeded permutation: 30 % held out for evaluation, the
rest for training; calibration uses the first `calibration_samples` of the training part,
so calibration and evaluation never share a sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ethosweep.runtime.errors import StageError

BUILTIN = ("digits",)
HELD_OUT = 0.3


class DatasetError(StageError):
    pass


@dataclass
class Splits:
    train_x: torch.Tensor  # (N, *input shape without batch)
    train_y: torch.Tensor | None
    eval_x: torch.Tensor
    eval_y: torch.Tensor | None
    source: str

    def calibration(self, samples: int) -> list[tuple[torch.Tensor]]:
        """The first `samples` training samples, each batched like the example input."""
        return [(x.unsqueeze(0),) for x in self.train_x[:samples]]

    def evaluation(self, samples: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        y = None if self.eval_y is None else self.eval_y[:samples]
        return self.eval_x[:samples], y


def load_splits(dataset: Any, example_inputs: tuple, seed: int) -> Splits:
    """Load, shape and split a model's dataset for its example inputs' shape."""
    if len(example_inputs) != 1:
        raise DatasetError(
            f"a dataset can feed single-input models only; this model takes {len(example_inputs)} inputs"
        )
    shape = tuple(example_inputs[0].shape)
    if shape[0] != 1:
        raise DatasetError(f"the model's example input has batch size {shape[0]}; datasets need batch size 1")
    if dataset == "digits":
        inputs, labels = _digits(shape)
        source = "digits (scikit-learn, 1797 images, 8x8 resized to " + "x".join(map(str, shape[1:])) + ")"
    elif isinstance(dataset, dict) and "path" in dataset:
        inputs, labels = _files(Path(dataset["path"]), shape)
        source = str(dataset["path"])
    else:
        raise DatasetError(
            f"unknown dataset {dataset!r}; built-in: {', '.join(BUILTIN)}, or {{path: file.npz|file.pt|folder}}"
        )
    inputs = inputs.to(example_inputs[0].dtype)
    order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(seed))
    held_out = max(1, int(round(len(inputs) * HELD_OUT)))
    eval_idx, train_idx = order[:held_out], order[held_out:]

    def take(t, idx):
        return None if t is None else t[idx]

    return Splits(inputs[train_idx], take(labels, train_idx), inputs[eval_idx], take(labels, eval_idx), source)


def _digits(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # (1797, 8, 8) in [0, 1]
    labels = torch.tensor(digits.target, dtype=torch.int64)
    if len(shape) == 4:
        _, channels, height, width = shape
        resized = F.interpolate(images.unsqueeze(1), size=(height, width), mode="bilinear", align_corners=False)
        return resized.repeat(1, channels, 1, 1), labels
    if len(shape) == 2 and shape[1] == 64:
        return images.reshape(len(images), 64), labels
    raise DatasetError(
        f"digits (8x8 images) cannot feed an input of shape {list(shape)}; it needs (1, C, H, W) or (1, 64)"
    )


def _files(path: Path, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
    if not path.exists():
        raise DatasetError(f"dataset path {path} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".pt", ".npz"))
        if not files:
            raise DatasetError(f"dataset folder {path} has no .pt or .npz files")
        samples = [_one_sample(f, shape) for f in files]
        return torch.stack(samples), None
    inputs, labels = _read(path)
    inputs = torch.as_tensor(inputs)
    if tuple(inputs.shape[1:]) != shape[1:]:
        raise DatasetError(
            f"{path}: inputs have shape {list(inputs.shape)}; the model needs (N, {', '.join(map(str, shape[1:]))})"
        )
    if labels is not None:
        labels = torch.as_tensor(labels).long().reshape(-1)
        if len(labels) != len(inputs):
            raise DatasetError(f"{path}: {len(labels)} labels for {len(inputs)} inputs")
    return inputs, labels


def _read(path: Path):
    if path.suffix == ".npz":
        with np.load(path) as data:
            if "inputs" not in data:
                raise DatasetError(f"{path}: an .npz dataset needs an array named 'inputs' (and optionally 'labels')")
            return data["inputs"], (data["labels"] if "labels" in data else None)
    if path.suffix == ".pt":
        content = torch.load(path, weights_only=True)
        if isinstance(content, dict):
            if "inputs" not in content:
                raise DatasetError(f"{path}: a .pt dataset dict needs the key 'inputs' (and optionally 'labels')")
            return content["inputs"], content.get("labels")
        return content, None
    raise DatasetError(f"{path}: unsupported dataset file; use .npz, .pt or a folder of them")


def _one_sample(path: Path, shape: tuple[int, ...]) -> torch.Tensor:
    content, _ = _read(path) if path.suffix == ".npz" else (torch.load(path, weights_only=True), None)
    if isinstance(content, (tuple, list)):
        content = content[0]
    sample = torch.as_tensor(content)
    if tuple(sample.shape) == shape:
        sample = sample[0]
    if tuple(sample.shape) != shape[1:]:
        raise DatasetError(f"{path}: a sample of shape {list(sample.shape)}; the model needs {list(shape)}")
    return sample
