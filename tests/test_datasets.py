"""Datasets: the built-in digits and the user's files, split reproducibly."""

import numpy as np
import pytest
import torch

from ethosweep.matrix.expand import dataset_files
from ethosweep.zoo.datasets import DatasetError, load_splits


def test_digits_are_resized_split_disjointly_and_reproducibly():
    example = (torch.rand(1, 1, 28, 28),)
    splits = load_splits("digits", example, seed=0)
    again = load_splits("digits", example, seed=0)
    assert splits.train_x.shape == (1258, 1, 28, 28) and splits.eval_x.shape == (539, 1, 28, 28)
    assert torch.equal(splits.eval_x, again.eval_x) and torch.equal(splits.train_y, again.train_y)
    assert 0.0 <= float(splits.train_x.min()) and float(splits.train_x.max()) <= 1.0
    # calibration comes from the training part, evaluation from the held-out part: no overlap
    calibration = torch.cat([c[0] for c in splits.calibration(100)])
    assert calibration.shape == (100, 1, 28, 28)
    flat_eval = {tuple(x.flatten()[::37].tolist()) for x in splits.eval_x}
    assert not any(tuple(x.flatten()[::37].tolist()) in flat_eval for x in calibration)
    other = load_splits("digits", example, seed=1)
    assert not torch.equal(other.eval_x, splits.eval_x)


def test_digits_fit_three_channels_and_flat_inputs():
    assert load_splits("digits", (torch.rand(1, 3, 32, 32),), 0).train_x.shape[1:] == (3, 32, 32)
    assert load_splits("digits", (torch.rand(1, 64),), 0).train_x.shape[1:] == (64,)
    with pytest.raises(DatasetError, match=r"digits \(8x8 images\) cannot feed an input of shape \[1, 640\]"):
        load_splits("digits", (torch.rand(1, 640),), 0)


def test_user_files(tmp_path):
    np.savez(tmp_path / "data.npz", inputs=np.random.rand(20, 1, 4, 4).astype(np.float32), labels=np.arange(20) % 3)
    splits = load_splits({"path": str(tmp_path / "data.npz")}, (torch.rand(1, 1, 4, 4),), 0)
    assert len(splits.train_x) + len(splits.eval_x) == 20 and splits.eval_y is not None

    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(5):
        torch.save(torch.rand(1, 1, 4, 4), folder / f"{i}.pt")
    splits = load_splits({"path": str(folder)}, (torch.rand(1, 1, 4, 4),), 0)
    assert len(splits.train_x) + len(splits.eval_x) == 5 and splits.train_y is None
    assert dataset_files({"path": "samples"}, tmp_path) == [f"samples/{i}.pt" for i in range(5)]

    with pytest.raises(DatasetError, match=r"inputs have shape \[20, 1, 4, 4\]; the model needs \(N, 3, 4, 4\)"):
        load_splits({"path": str(tmp_path / "data.npz")}, (torch.rand(1, 3, 4, 4),), 0)
    with pytest.raises(DatasetError, match="a dataset can feed single-input models only"):
        load_splits("digits", (torch.rand(1, 64), torch.rand(1, 64)), 0)


def test_random_data_calibrates_and_evaluates_on_one_distribution_drawn_apart():
    """`dataset: random`: calibration and evaluation inputs uniform in the example's range, seeded,
    never the same samples (ethosweep.compile.artifacts)."""
    from ethosweep.compile.artifacts import calibration_set, evaluation_set

    example = (torch.rand(1, 3, 8, 8) * 2 - 1,)
    low, high = float(example[0].min()), float(example[0].max())
    calibration, said = calibration_set(example, "random", 20, seed=0)
    again, _ = calibration_set(example, "random", 20, seed=0)
    assert len(calibration) == 20 and said == "20 random inputs in the example inputs' value range (dataset: random)"
    assert all(torch.equal(a[0], b[0]) for a, b in zip(calibration, again))
    assert all(low <= float(c[0].min()) and float(c[0].max()) <= high for c in calibration)
    evaluation, labels, described = evaluation_set(example, "random", 0, 500, 8)
    assert labels is None and len(evaluation) == 8 and "(calibrated on others of the kind)" in described
    drawn = {c[0].sum().item() for c in calibration}
    assert not drawn & {e[0].sum().item() for e in evaluation}
