"""The 95 % intervals verdicts rest on (ethosweep.verify.intervals): known values, and coverage of at
least 93 % at every n the verdicts use (8, 16, 40, 100, 400), simulated on per-input values shaped
like those the verify stage meets, so that "ok" and "flagged" mean what they say."""

import math

import numpy as np
import pytest

from ethosweep.verify.intervals import (
    MIN_SAMPLES,
    Effect,
    Interval,
    clopper_pearson,
    geometric_mean,
    log_ratio_db,
    mean_interval,
    paired_difference,
    wilson,
)

SIZES = (8, 16, 40, 100, 400)
# Per-input values in dB (what log_ratio_db averages), each with its true mean: symmetric, skewed,
# heavy-tailed, mostly zero (most inputs identical on both paths, a few not), and the shapes the
# presets' verifications measured (mobilenet_v2 int8 at 224: -0.004 dB, sd 0.17, skew -0.4;
# resnet8: 15 of 40 inputs not 0, sd 0.10, skew -0.8).
SHAPES = {
    "normal": (lambda g, n: g.normal(1, 2, n), 1.0),
    "exponential": (lambda g, n: g.exponential(2, n), 2.0),
    "chi-square 1": (lambda g, n: g.chisquare(1, n), 1.0),
    "lognormal": (lambda g, n: g.lognormal(0, 1, n), math.exp(0.5)),
    "t 3": (lambda g, n: 1 + g.standard_t(3, n), 1.0),
    "2 % not zero": (lambda g, n: np.where(g.random(n) < 0.02, g.exponential(5, n), 0.0), 0.1),
    "20 % not zero": (lambda g, n: np.where(g.random(n) < 0.2, g.exponential(5, n), 0.0), 1.0),
    "50 % not zero, both signs": (lambda g, n: np.where(g.random(n) < 0.5, g.normal(2, 3, n), 0.0), 1.0),
    "mobilenet_v2 int8": (lambda g, n: g.normal(-0.004, 0.17, n) - 0.03 * g.exponential(1, n) + 0.03, -0.004),
    "resnet8 int8": (lambda g, n: np.where(g.random(n) < 15 / 40, g.normal(0.016, 0.16, n), 0.0), 0.006),
}


def coverage(draw, truth, interval, n: int, repeats: int, seed: int) -> float:
    """The simulated coverage's one-sided 95 % upper bound: at least 0.93 unless the simulation shows
    the interval covering less than 93 % (300-500 repeats resolve a few points; docs/numerics.md has
    the coverage measured with 5,000). Samples whose every input gives 0 are left out: the verdict
    states exactness for them instead (clopper_pearson)."""
    generator, hits, used = np.random.default_rng(seed), 0, 0
    for _ in range(repeats):
        values = draw(generator, n)
        if not np.any(values):
            continue
        found = interval(values)
        used += 1
        hits += found.low <= truth <= found.high
    return clopper_pearson(hits, used, 0.90).high if used else 1.0


def exact_coverage(interval, probabilities: list[float], n: int, truth: float) -> float:
    """The exact coverage of an interval for counts (a proportion's, or paired proportions'), summed
    over every outcome of n trials with its multinomial probability."""
    from itertools import product

    logs = [math.log(p) if p > 0 else -math.inf for p in probabilities]
    covered = 0.0
    for head in product(range(n + 1), repeat=len(probabilities) - 1):
        if sum(head) > n:
            continue
        counts = [*head, n - sum(head)]
        if any(c and logs[i] == -math.inf for i, c in enumerate(counts)):
            continue  # an impossible outcome
        found = interval(*counts)
        if found.low <= truth <= found.high:
            log_pmf = math.lgamma(n + 1) + sum(c * logs[i] - math.lgamma(c + 1) for i, c in enumerate(counts) if c)
            covered += math.exp(log_pmf)
    return covered


@pytest.mark.parametrize("shape", SHAPES)
def test_the_mean_of_per_input_values_covers_at_every_n_the_verdicts_use(shape):
    draw, truth = SHAPES[shape]
    for n in SIZES:
        covered = coverage(draw, truth, mean_interval, n, {400: 200, 100: 300}.get(n, 500), seed=n)
        assert covered >= 0.93, (shape, n, covered)


def test_below_forty_inputs_a_mean_is_not_bounded():
    """t and bootstrap-t both fall short on skewed values at 8-16 inputs (84-91 % simulated): a mean is
    not bounded from fewer than MIN_SAMPLES, so no verdict rests on one."""
    skewed = np.random.default_rng(1).lognormal(0, 1, MIN_SAMPLES - 1)
    assert mean_interval(skewed).low == -math.inf and mean_interval(skewed).high == math.inf
    assert math.isfinite(mean_interval(np.append(skewed, 1.0)).high)


def test_a_geometric_mean_covers_on_skewed_per_input_errors():
    for spread in (0.3, 1.0, 2.0):
        for n in SIZES:
            covered = coverage(
                lambda g, n: g.lognormal(math.log(0.1), spread, n),
                0.1,
                lambda v: geometric_mean(v, 1e-9),
                n,
                300,
                seed=n,
            )
            assert covered >= 0.93, (spread, n, covered)


def test_clopper_pearson_covers_and_bounds_what_was_not_seen():
    # 0 of n: the share is bounded, not 0 (one-sided 95 %: 1 - 0.05^(1/n); 31 % at 8, 3 % at 100)
    assert clopper_pearson(0, 8, 0.90).high == pytest.approx(1 - 0.05 ** (1 / 8))
    assert clopper_pearson(0, 100, 0.90).high == pytest.approx(0.0295, abs=1e-4)
    from scipy.stats import binom

    for n in SIZES:  # exact: every count's probability
        found = [clopper_pearson(k, n) for k in range(n + 1)]
        for p in (0.005, 0.05, 0.3, 0.9):
            covered = sum(binom.pmf(k, n, p) for k, f in enumerate(found) if f.low <= p <= f.high)
            assert covered >= 0.95, (p, n, covered)


def test_wilson_matches_the_published_values():
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3
    assert (round(wilson(81, 263).low, 4), round(wilson(81, 263).high, 4)) == (0.2553, 0.3662)
    assert (round(wilson(0, 20).low, 4), round(wilson(0, 20).high, 4)) == (0.0, 0.1611)


def test_the_paired_difference_covers_at_every_n():
    """Newcombe's method 10 (top-1 agreement, NPU path minus quantized model): exact coverage from 8 to
    40 samples (its lowest, 93.7 %, at 40 with 20 % discordant pairs), simulated at 100 and 400."""
    for cells in ([0.97, 0.01, 0.01, 0.01], [0.90, 0.03, 0.05, 0.02], [0.6, 0.1, 0.1, 0.2], [0.98, 0.0, 0.02, 0.0]):
        truth = cells[1] - cells[2]
        for n in (8, 16, 40):
            assert exact_coverage(paired_difference, cells, n, truth) >= 0.93, (cells, n)
        for n in (100, 400):
            draw = lambda g, n: g.multinomial(n, cells)  # noqa: E731
            covered = coverage(draw, truth, lambda counts: paired_difference(*counts), n, 300, seed=n)
            assert covered >= 0.93, (cells, n, covered)


def test_identical_paths_give_a_narrow_but_honest_top1_interval():
    # no sample where only one path agrees: on 499 samples within +-0.8 points, on 100 only +-3.7
    assert paired_difference(499, 0, 0, 0).high == pytest.approx(0.0076, abs=1e-4)
    assert paired_difference(96, 0, 0, 4).low < -0.03


def test_an_energy_ratio_at_rounding_level_is_none():
    """log_ratio_db counts both energies from the floor ExecuTorch's tolerance allows: an NPU path
    whose extra error is a fraction of it is ~0 dB, one far above the quantized model's is not."""
    quantized = np.full(50, 1e-6)
    rounding = log_ratio_db(quantized * 3, quantized, floor=1e-3)
    assert abs(rounding.estimate) < 0.01 and rounding.high < 0.1
    worse = log_ratio_db(np.full(50, 0.4) * np.linspace(0.9, 1.1, 50), np.full(50, 0.1), floor=1e-3)
    assert worse.low > 5.5 and worse.shows(3.01, "above") == "beyond"


def test_shown_within_beyond_or_undecided():
    interval = Interval(0.4, 0.1, 0.7, 100)
    assert interval.shows(3.0, "above") == "within" and interval.shows(0.05, "above") == "beyond"
    assert interval.shows(0.5, "above") == "undecided"
    assert interval.shows(0.05, "below") == "within" and interval.shows(0.9, "below") == "beyond"
    # the half-width shrinks as 1/sqrt(n): to clear 0.5 from 0.4, about (0.3 / 0.1)^2 = 9 times the samples
    assert interval.samples_to_decide(0.5) == pytest.approx(900, abs=1)
    assert Interval(0.5, 0.2, 0.8, 100).samples_to_decide(0.5) is None


def test_when_one_input_of_many_differs_the_advice_is_enough_inputs_for_a_second():
    """One differing input of 80 (encoder_layer int8 in the attention preset) leaves the mean unbounded:
    doubling to 160 sees one or none again 41 % of the time, so the advice is the n at which two
    differ with 95 % probability at the share seen; and at that n, with two or more, it decides."""
    one = np.zeros(80)
    one[0] = 0.6
    interval = mean_interval(one)
    assert (interval.low, interval.high, interval.differing) == (-math.inf, math.inf, 1)
    needed = interval.samples_to_decide(3.0103)
    share = 1 / 80
    assert needed == 380 and 1 - math.exp(-share * needed) * (1 + share * needed) >= 0.95
    simulated = np.random.default_rng(5)
    decided = 0
    for _ in range(200):
        values = np.where(simulated.random(needed) < share, simulated.uniform(0.2, 1.0, needed), 0.0)
        decided += mean_interval(values).shows(3.0103, "above") != "undecided"
    assert decided >= 0.93 * 200
    # too few inputs to bound any mean: twice as many, at least MIN_SAMPLES
    assert mean_interval(one[:20]).samples_to_decide(3.0103) == 40


def test_intervals_are_reproducible():
    values = np.random.default_rng(11).lognormal(0, 1, 60)
    assert mean_interval(values) == mean_interval(values)


def test_a_tiny_effect_is_printed_with_the_width_of_its_interval():
    """multihead_attention a16w8 (the attention preset): 3 int16 steps off on 39 of 40 inputs is an
    effect of thousandths of a dB, which two decimals printed as "0.00 dB [0.00, 0.00]"."""
    tiny = Effect("the NPU path: ", Interval(0.0012, 0.0004, 0.0021, 40), 3.0103, "above", " dB")
    assert tiny.text().startswith("the NPU path: 0.001 dB [0.000, 0.002] (tolerance: at most 3.010 dB")
    wide = Effect("the NPU path: ", Interval(0.4, 0.1, 0.7, 40), 3.0103, "above", " dB")
    assert wide.text().startswith("the NPU path: 0.40 dB [0.10, 0.70] (tolerance: at most 3.01 dB")
    exact = Effect("", Interval(0.0, 0.0, 0.0, 40), 3.0103, "above", " dB")
    assert exact.text().startswith("0.00 dB [0.00, 0.00]")  # no width to show: exactness is said elsewhere
