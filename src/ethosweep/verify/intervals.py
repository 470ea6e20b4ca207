"""95 % intervals for what the verify stage measures, and what they show against a tolerance.

A verdict states an effect and how sure it is (ethosweep.verify.verdicts): "ok" only when the
interval lies inside the tolerance (an equivalence test), "flagged" when it lies beyond it,
"inconclusive" otherwise. Each interval here holds its coverage (at least 93 % for a nominal 95 %)
at every sample size the verdicts use, on per-sample values shaped like the presets' (point masses
at zero, skewed, heavy-tailed): tests/test_intervals.py simulates it, docs/numerics.md has the table.

- A share of inputs (on how many the NPU path differs; top-1 agreement with float): Clopper-Pearson's
  exact interval (scipy's binomtest), which never covers less than 95 %.
- The difference of two paired proportions (top-1 agreement, NPU path minus quantized model):
  Newcombe's method 10 (Newcombe 1998), Wilson intervals combined through the pairs' correlation.
- A typical per-input ratio or error (the NPU path's error energy over the quantized model's; the
  relative error and 1 - cosine against float): the mean of its logarithm over the inputs, i.e. the
  geometric mean. Per-input energies are so skewed (a few inputs carry most of a sum) that intervals
  for ratios of sums under-cover at every n here; their logarithms are close to normal, but can still
  be skewed, so the interval is the union of Student's t and the bootstrap-t (each covers where the
  other falls short), from MIN_SAMPLES inputs on (below, skewed values leave any interval short: it is
  unbounded, and the verdict inconclusive). Where most inputs give exactly 0 and a few do not, the
  share that does not (Clopper-Pearson) and their mean (Student's t), each at 97.5 %, bound it too.

Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

LEVEL = 0.95
# One input of n differs: the mean's interval is unbounded until a second one does (one value has no
# spread). Doubling n gives two on average, and one or none 41 % of the time (Poisson, mean 2). At the
# share seen, 4.74 n inputs give at least two with 95 % probability (1 - e^-m (1 + m) = 0.95 at m = 4.74).
RARE_SAMPLES_FACTOR = 4.74


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95 % interval [low, high], from `samples` samples."""

    estimate: float
    low: float
    high: float
    samples: int
    differing: int | None = None  # a mean over inputs: on how many the value is not exactly 0

    def as_tuple(self) -> tuple[float, float, float]:
        return self.estimate, self.low, self.high

    def as_dict(self) -> dict:
        return {
            "estimate": _rounded(self.estimate),
            "low": _rounded(self.low),
            "high": _rounded(self.high),
            "samples": self.samples,
        }

    def shows(self, tolerance: float, worse_when: str) -> str:
        """'within' (the whole interval on the acceptable side of `tolerance`), 'beyond' (the whole
        interval past it), or 'undecided'. `worse_when`: 'above' (an error: larger is worse) or
        'below' (an agreement: smaller is worse)."""
        if worse_when == "above":
            return "within" if self.high <= tolerance else "beyond" if self.low > tolerance else "undecided"
        return "within" if self.low >= tolerance else "beyond" if self.high < tolerance else "undecided"

    def samples_to_decide(self, tolerance: float) -> int | None:
        """About how many samples would narrow the interval enough to decide, if the estimate stays
        where it is (the half-width shrinks as 1/sqrt(n)); where the interval is still unbounded, enough
        to bound it: twice as many, or, where a single input differs, enough that at least two would
        at the share seen (RARE_SAMPLES_FACTOR); None when the estimate sits on the tolerance itself
        (no number of samples would)."""
        distance = abs(self.estimate - tolerance)
        half = max(self.high - self.estimate, self.estimate - self.low)
        if distance <= 0 or not math.isfinite(distance) or self.samples < 1:
            return None
        if not math.isfinite(half):
            if self.differing == 1 and self.samples >= MIN_SAMPLES:
                return math.ceil(self.samples * RARE_SAMPLES_FACTOR)
            return max(2 * self.samples, MIN_SAMPLES)
        return max(self.samples + 1, math.ceil(self.samples * (half / distance) ** 2))


@dataclass
class Effect:
    """A measured effect with its 95 % interval, against a tolerance: what a check's verdict rests on.
    Said as `before` + 'estimate [low, high]' + `unit` + `after`, then the tolerance and the samples."""

    before: str  # 'the NPU path: '
    interval: Interval
    tolerance: float
    worse_when: str  # 'above' or 'below' the tolerance
    unit: str = ""  # ' dB', ' points'
    after: str = ""  # ' more error energy against float than the quantized model'
    scale: float = 1.0  # shown as value * scale (proportions in points: 100)
    decimals: int = 2

    @property
    def shows(self) -> str:
        return self.interval.shows(self.tolerance, self.worse_when)

    def text(self) -> str:
        """'the NPU path: 0.40 dB [0.10, 0.70] more error energy against float than the quantized model
        on a typical input (tolerance: at most 3.01 dB; 320 samples)'"""
        iv, decimals = self.interval, _decimals_to_show(self.interval, self.scale, self.decimals)
        f = lambda v: _number(v * self.scale, decimals)  # noqa: E731
        bound = "at most" if self.worse_when == "above" else "at least"
        return (
            f"{self.before}{f(iv.estimate)}{self.unit} [{f(iv.low)}, {f(iv.high)}]{self.after} (tolerance: {bound} "
            f"{f(self.tolerance)}{self.unit}; {iv.samples} samples)"
        )

    def as_dict(self) -> dict:
        return {
            "effect": f"{self.before.strip(': ')}{self.after}".strip(),
            **self.interval.as_dict(),
            "tolerance": self.tolerance,
            "worse_when": self.worse_when,
            "unit": self.unit.strip(),
            "shows": self.shows,
        }


def _number(value: float, decimals: int) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{decimals}f}"


def _decimals_to_show(interval: Interval, scale: float, decimals: int) -> int:
    """At least `decimals`, and as many more (up to 6) as an interval of some width needs not to be
    printed as [x, x]: a tiny effect said as a zero-width interval would read as exactness."""
    low, high = interval.low * scale, interval.high * scale
    while decimals < 6 and math.isfinite(low) and math.isfinite(high) and low < high:
        if _number(low, decimals) != _number(high, decimals):
            break
        decimals += 1
    return decimals


def decide(effects: list[Effect]) -> tuple[str, int | None]:
    """'beyond' if any effect is shown beyond its tolerance, 'within' if all are shown within, else
    'undecided' with about how many samples would decide the undecided ones (None: none would)."""
    if any(e.shows == "beyond" for e in effects):
        return "beyond", None
    undecided = [e for e in effects if e.shows == "undecided"]
    if not undecided:
        return "within", None
    needed = [e.interval.samples_to_decide(e.tolerance) for e in undecided]
    return "undecided", max(needed) if all(needed) else None


def would_decide(needed: int | None) -> str:
    return f"about {needed:,} samples would decide" if needed else "more samples would not decide it"


def _rounded(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 6)


@lru_cache(maxsize=4096)
def t_quantile(degrees: int, level: float = LEVEL) -> float:
    """Student's t quantile for a two-sided interval at `level`."""
    if degrees < 1:
        return math.inf
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, degrees))


def clopper_pearson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """A proportion's exact (Clopper-Pearson) interval: never covers less than `level`. With 0 of n it
    bounds the share at about 3.7 / n (95 %): not finding a difference is not finding none."""
    if n <= 0:
        return Interval(math.nan, 0.0, 1.0, 0)
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=level, method="exact")
    return Interval(successes / n, float(ci.low), float(ci.high), n)


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """A proportion's Wilson score interval (Newcombe's method 10 is built from two of them)."""
    if n <= 0:
        return Interval(math.nan, 0.0, 1.0, 0)
    z = _z(level)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


@lru_cache(maxsize=16)
def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


def paired_difference(both: int, first_only: int, second_only: int, neither: int) -> Interval:
    """The first proportion minus the second, on the same samples (Newcombe's method 10): `both`
    samples where both succeed, `first_only` where only the first does, and so on."""
    n = both + first_only + second_only + neither
    if n <= 0:
        return Interval(math.nan, -1.0, 1.0, 0)
    first, second = wilson(both + first_only, n), wilson(both + second_only, n)
    margins = (both + first_only) * (second_only + neither) * (both + second_only) * (first_only + neither)
    phi = (both * neither - first_only * second_only) / math.sqrt(margins) if margins else 0.0
    d1, u1 = first.estimate - first.low, first.high - first.estimate
    d2, u2 = second.estimate - second.low, second.high - second.estimate
    below = math.sqrt(max(0.0, d1**2 - 2 * phi * d1 * u2 + u2**2))
    above = math.sqrt(max(0.0, u1**2 - 2 * phi * u1 * d2 + d2**2))
    estimate = (first_only - second_only) / n
    return Interval(estimate, max(-1.0, estimate - below), min(1.0, estimate + above), n)


# From this many inputs on, the mean's interval covers at least 93 % on every shape simulated (skewed,
# heavy-tailed, mostly zero: tests/test_intervals.py); below, t and bootstrap-t both fall short on
# skewed values (84-91 % at 8-16 inputs), so a mean is not bounded from fewer.
MIN_SAMPLES = 40
BOOTSTRAP_RESAMPLES = 999
BOOTSTRAP_SEED = 20261128


def mean_t(values, level: float = LEVEL) -> Interval:
    """The mean with Student's t interval (unbounded from fewer than two values)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return Interval(math.nan, -math.inf, math.inf, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, -math.inf, math.inf, n)
    half = t_quantile(n - 1, level) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def bootstrap_t(values, level: float = LEVEL) -> Interval:
    """The mean with the bootstrap-t (studentized bootstrap) interval, resampled from a fixed seed."""
    x = np.asarray(values, dtype=float)
    n, mean, sd = len(x), float(x.mean()), float(x.std(ddof=1))
    if n < 2 or sd == 0:
        return mean_t(x, level)
    resampled = x[np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, (BOOTSTRAP_RESAMPLES, n))]
    sds = resampled.std(axis=1, ddof=1)
    t = (resampled.mean(axis=1)[sds > 0] - mean) / (sds[sds > 0] / math.sqrt(n))
    low_q, high_q = np.quantile(t, [(1 - level) / 2, (1 + level) / 2])
    return Interval(mean, mean - high_q * sd / math.sqrt(n), mean - low_q * sd / math.sqrt(n), n)


def mean_interval(values) -> Interval:
    """The mean of per-input values with an interval that holds at this n on the shapes the verdicts
    meet (see the module docstring): unbounded below MIN_SAMPLES inputs; else the union of Student's
    t and the bootstrap-t, and, where some values are exactly 0 (inputs on which nothing differs),
    also the share of the others times their mean, each bounded at 97.5 %."""
    x = np.asarray(values, dtype=float)
    n, nonzero = len(x), x[x != 0]
    mean = float(x.mean()) if n else math.nan
    if n < MIN_SAMPLES:
        return Interval(mean, -math.inf, math.inf, n, len(nonzero))
    t, boot = mean_t(x), bootstrap_t(x)
    low, high = min(t.low, boot.low), max(t.high, boot.high)
    if 0 < len(nonzero) < n:
        share, given = clopper_pearson(len(nonzero), n, 0.975), mean_t(nonzero, 0.975)
        corners = [s * m for s in (share.low, share.high) for m in (given.low, given.high)]
        low, high = min(low, *corners), max(high, *corners)
    return Interval(mean, min(low, mean), max(high, mean), n, len(nonzero))


def log_ratio_db(numerators, denominators, floor: float = 0.0) -> Interval:
    """The typical per-input ratio of two paired energies in dB: the mean over inputs of
    10*log10((numerator + floor) / (denominator + floor)), i.e. their geometric mean ratio, with
    mean_interval's. `floor`: an energy both sides get, below which a difference is
    not one (the energy ExecuTorch's output tolerance allows: a ratio at rounding level is ~0 dB)."""
    a, b = np.asarray(numerators, dtype=float) + floor, np.asarray(denominators, dtype=float) + floor
    usable = (a > 0) & (b > 0)
    decibels = np.where(usable, 10 * np.log10(np.where(usable, a, 1) / np.where(usable, b, 1)), 0.0)
    return mean_interval(decibels)


def geometric_mean(values, floor: float) -> Interval:
    """The geometric mean of non-negative per-input values (each raised to at least `floor`, where a
    value is exact: its logarithm must exist) with mean_interval's interval on the logarithm. Inputs
    whose value is not a number (nothing to judge on them) are left out."""
    x = np.asarray(values, dtype=float)
    interval = mean_interval(np.log(np.maximum(x[np.isfinite(x)], floor)))
    back = [math.exp(v) if math.isfinite(v) else (0.0 if v < 0 else math.inf) for v in interval.as_tuple()]
    return Interval(*back, interval.samples)


# Per-input errors below these are exact in double precision: their logarithm's floor.
RELATIVE_ERROR_FLOOR = 1e-9
COSINE_GAP_FLOOR = 1e-12


def per_input_relative_errors(sums: dict) -> list[float]:
    """Each input's relative error (Frobenius) against float, from its sums of squares."""
    return [math.sqrt(d / r) if r > 0 else math.nan for d, r in zip(sums["diff_diff"], sums["ref_ref"])]


def per_input_cosine_gaps(sums: dict) -> list[float]:
    """Each input's 1 - cosine with float, from its sums of products."""
    gaps = []
    for ro, rr, oo in zip(sums["ref_out"], sums["ref_ref"], sums["out_out"]):
        gaps.append(1.0 - ro / math.sqrt(rr * oo) if rr > 0 and oo > 0 else math.nan)
    return gaps
