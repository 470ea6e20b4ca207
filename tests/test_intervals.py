"""The 95 % intervals verdicts rest on (ethosweep.verify.intervals): known values, and coverage close to
95 % on simulated data like the verify stage's, so that "ok" and "flagged" mean what they say."""

import math

import numpy as np
import pytest

from ethosweep.verify.intervals import (
    Interval,
    bootstrap,
    cosine_of,
    paired_difference,
    ratio_db,
    relative_error_of,
    wilson,
)


def test_wilson_matches_the_published_values():
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3
    assert (round(wilson(81, 263).low, 4), round(wilson(81, 263).high, 4)) == (0.2553, 0.3662)
    assert (round(wilson(15, 148).low, 4), round(wilson(15, 148).high, 4)) == (0.0624, 0.1605)
    assert (round(wilson(0, 20).low, 4), round(wilson(0, 20).high, 4)) == (0.0, 0.1611)
    assert (round(wilson(1, 29).low, 4), round(wilson(1, 29).high, 4)) == (0.0061, 0.1718)


def test_the_paired_difference_covers_the_truth_about_95_percent_of_the_time():
    generator = np.random.default_rng(7)
    for cells in ([0.90, 0.03, 0.05, 0.02], [0.6, 0.1, 0.1, 0.2]):
        truth, hits = cells[1] - cells[2], 0
        for _ in range(600):
            interval = paired_difference(*generator.multinomial(300, cells))
            hits += interval.low <= truth <= interval.high
        assert 0.92 <= hits / 600 <= 0.985, (cells, hits / 600)


def test_identical_paths_give_a_narrow_but_honest_top1_interval():
    # no sample where only one path agrees: on 499 samples within +-0.8 points, on 100 only +-3.7
    assert paired_difference(499, 0, 0, 0).high == pytest.approx(0.0076, abs=1e-4)
    assert paired_difference(96, 0, 0, 4).low < -0.03


def test_fiellers_ratio_interval_covers_skewed_errors():
    """Per-sample error energies are skewed (a few samples carry most of it): Fieller's interval holds
    its coverage from 8 samples on (the delta method's fell to 86 % there)."""
    generator = np.random.default_rng(3)
    truth = 10 * math.log10(1.3 * math.exp(0.3**2 / 2))
    for samples in (8, 100):
        hits = 0
        for _ in range(400):
            quantized = generator.lognormal(0, 1, samples)
            npu = quantized * generator.lognormal(math.log(1.3), 0.3, samples)
            interval = ratio_db(npu, quantized)
            hits += interval.low <= truth <= interval.high
        assert 0.92 <= hits / 400 <= 0.995, (samples, hits / 400)


def test_a_fixed_ratio_has_nothing_to_vary():
    assert ratio_db([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == Interval(0.0, 0.0, 0.0, 3)
    doubled = ratio_db([2.0, 4.0], [1.0, 2.0])
    assert doubled.low == doubled.high == pytest.approx(10 * math.log10(2))
    # two samples that vary: unbounded below, never shown within or beyond a lower bound
    assert math.isinf(ratio_db([1.0, 3.0], [1.0, 1.0]).low)


def test_shown_within_beyond_or_undecided():
    interval = Interval(0.4, 0.1, 0.7, 100)
    assert interval.shows(3.0, "above") == "within" and interval.shows(0.05, "above") == "beyond"
    assert interval.shows(0.5, "above") == "undecided"
    assert interval.shows(0.05, "below") == "within" and interval.shows(0.9, "below") == "beyond"
    # the half-width shrinks as 1/sqrt(n): to clear 0.5 from 0.4, about (0.3 / 0.1)^2 = 9 times the samples
    assert interval.samples_to_decide(0.5) == pytest.approx(900, abs=1)
    assert Interval(0.5, 0.2, 0.8, 100).samples_to_decide(0.5) is None


def test_the_bootstrap_of_cosine_and_relative_error_is_reproducible():
    generator = np.random.default_rng(11)
    reference = generator.normal(0, 1, (40, 10))
    output = reference + generator.normal(0, 0.1, (40, 10))
    sums = {
        "ref_out": (reference * output).sum(1).tolist(),
        "ref_ref": (reference * reference).sum(1).tolist(),
        "out_out": (output * output).sum(1).tolist(),
        "diff_diff": ((output - reference) ** 2).sum(1).tolist(),
    }
    relative = bootstrap(relative_error_of, sums)
    assert relative.low < relative.estimate < relative.high and relative == bootstrap(relative_error_of, sums)
    assert 0.08 < relative.estimate < 0.12 and 0.99 < bootstrap(cosine_of, sums).low
