"""Training a model of the zoo on its dataset's training split (CPU, seeded, deterministic).

So that at least one model's accuracy means something: the seeds' MNIST CNN reaches
~98 % on the held-out digits in a few seconds. The weights are an artifact of the
workflow (results/train/<model>/weights.pt), loaded by the export stage.
"""

from __future__ import annotations

import io
import logging
import time

import torch

from ethosweep.matrix.models import model_spec_from_params
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.io import atomic_write_bytes, write_json
from ethosweep.runtime.provenance import tool_versions
from ethosweep.zoo.datasets import load_splits
from ethosweep.zoo.models import ModelError, load_model, raised

log = logging.getLogger(__name__)


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> float:
    model.eval()
    with torch.no_grad():
        predictions = torch.cat([model(x[i : i + batch]).argmax(dim=1) for i in range(0, len(x), batch)])
    return float((predictions == y).float().mean())


def fit(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, batch_size: int, seed: int
) -> list[float]:
    """Adam on cross-entropy, shuffled with a seeded generator; returns the loss per epoch."""
    torch.use_deterministic_algorithms(True)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        total = 0.0
        for start in range(0, len(x), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            total += float(loss) * len(idx)
        losses.append(total / len(x))
    model.eval()
    return losses


def train_model(model: dict, seed: int, dataset, train: dict, weights: str, meta: str, base_dir: str = ".") -> dict:
    """Train one model on its dataset; write its weights (a state_dict) and the training record."""
    spec = model_spec_from_params(model)
    torch.set_num_threads(1)  # deterministic and fair to the other jobs
    module, example_inputs = load_model(spec, seed, base_dir)
    splits = load_splits(dataset, example_inputs, seed)
    if splits.train_y is None:
        raise StageError(f"model '{spec.name}': training needs labels, and dataset {splits.source} has none")
    started = time.perf_counter()
    try:
        with running(f"model '{spec.name}'", f"training on {splits.source}"):
            losses = fit(
                module, splits.train_x, splits.train_y, train["epochs"], train["lr"], train["batch_size"], seed
            )
    except (Exception, SystemExit) as error:  # the model's code, run for training: its own failure
        raise ModelError(f"model '{spec.name}' ({spec.source}): training {raised(error)}") from error
    seconds = time.perf_counter() - started
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    atomic_write_bytes(weights, buffer.getvalue())
    record = {
        "dataset": splits.source,
        "train_samples": len(splits.train_x),
        "held_out_samples": len(splits.eval_x),
        "epochs": train["epochs"],
        "lr": train["lr"],
        "batch_size": train["batch_size"],
        "loss_per_epoch": [round(loss, 5) for loss in losses],
        "train_top1": accuracy(module, splits.train_x, splits.train_y),
        "held_out_top1": accuracy(module, splits.eval_x, splits.eval_y) if splits.eval_y is not None else None,
        "seconds": round(seconds, 2),
        "versions": tool_versions(),
    }
    write_json(meta, record)
    log.info(
        "trained %s for %d epochs in %.1f s: train top-1 %.3f, held-out top-1 %s",
        spec.name,
        train["epochs"],
        seconds,
        record["train_top1"],
        record["held_out_top1"],
    )
    return record
