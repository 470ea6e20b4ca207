"""95 % intervals for what the verify stage measures, and what they show against a tolerance.

A verdict states an effect and how sure it is (ethosweep.verify.verdicts): "ok" only when the
interval lies inside the tolerance (an equivalence test: shown within), "flagged" when it lies
beyond it (shown worse), "inconclusive" otherwise, with about how many samples would decide. Not
finding a difference is not finding none.

- A proportion (top-1 agreement with float): Wilson's score interval (Wilson 1927), which keeps
  its coverage near 0 and 1, where agreement lives.
- The difference of two paired proportions (the NPU path's top-1 agreement with float minus the
  quantized model's, on the same samples): Newcombe's method 10 (Newcombe 1998, "Improved
  confidence intervals for the difference between binomial proportions based on paired data"),
  Wilson intervals of each combined through the pairs' correlation.
- A ratio of two paired sums (the NPU path's error energy against float over the quantized
  model's), in dB: Fieller's interval for a ratio of paired means, Student's t on n - 1 degrees
  of freedom.
- Anything else computed from per-sample sums (cosine, relative error): a percentile bootstrap over
  the samples, 2,000 resamples from a fixed seed (the same data give the same interval).

Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # the normal 97.5 % quantile
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261126


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95 % interval [low, high], from `samples` samples."""

    estimate: float
    low: float
    high: float
    samples: int

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
        where it is (the half-width shrinks as 1/sqrt(n)); twice as many where the interval is still
        unbounded; None when the estimate sits on the tolerance itself (no number of samples would)."""
        distance = abs(self.estimate - tolerance)
        half = max(self.high - self.estimate, self.estimate - self.low)
        if distance <= 0 or not math.isfinite(distance) or self.samples < 1:
            return None
        if not math.isfinite(half):  # too few samples to bound it at all: twice as many, at least
            return max(2 * self.samples, 16)
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
        (tolerance: at most 3.01 dB; 320 samples)'"""
        iv, f = self.interval, lambda v: _number(v * self.scale, self.decimals)  # noqa: E731
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


def t_quantile(degrees: int) -> float:
    """Student's t 97.5 % quantile (scipy's when installed, which ExecuTorch's dependencies bring;
    else the Cornish-Fisher expansion, within 1e-3 from 3 degrees of freedom on)."""
    if degrees < 1:
        return math.inf
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, degrees))
    except ImportError:  # pragma: no cover - scipy is installed with ExecuTorch
        z, n = Z95, degrees
        return z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)


def wilson(successes: int, n: int) -> Interval:
    """A proportion's Wilson score interval."""
    if n <= 0:
        return Interval(math.nan, 0.0, 1.0, 0)
    p = successes / n
    z2 = Z95**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


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


def ratio_db(numerators: list[float], denominators: list[float]) -> Interval:
    """10*log10(sum(numerators) / sum(denominators)) over paired per-sample values, with Fieller's
    interval for a ratio of paired means (Fieller 1954; Student's t on n - 1 degrees of freedom),
    unbounded above when the denominator's mean is not clearly above 0. Identical pairs, or pairs in
    a fixed ratio, give a zero-width interval: nothing varies. (Fieller's, not the delta method's:
    on skewed per-sample errors the delta method covered 86 % at n = 8, Fieller's 97 %; both 94-95 %
    from n = 100, tests/test_intervals.py.)"""
    a, b = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    n = len(a)
    if n == 0 or b.sum() <= 0:
        return Interval(math.nan, -math.inf, math.inf, n)
    if a.sum() <= 0:  # no numerator at all: as far below as can be
        return Interval(-math.inf, -math.inf, -math.inf, n)
    to_db = 10 / math.log(10)
    estimate = to_db * math.log(a.sum() / b.sum())
    if np.allclose(a, (a.sum() / b.sum()) * b, rtol=1e-9, atol=0):
        return Interval(estimate, estimate, estimate, n)  # every sample in the same ratio: nothing varies
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, n)
    mean_a, mean_b = float(a.mean()), float(b.mean())
    var_a, var_b = float(a.var(ddof=1)) / n, float(b.var(ddof=1)) / n
    cov = float(((a - mean_a) * (b - mean_b)).sum()) / (n - 1) / n
    q = t_quantile(n - 1) ** 2
    # the ratios r with (mean_a - r mean_b)^2 <= q Var(mean_a - r mean_b): a quadratic in r
    qa, qb, qc = mean_b**2 - q * var_b, -2 * (mean_a * mean_b - q * cov), mean_a**2 - q * var_a
    discriminant = qb * qb - 4 * qa * qc
    if qa <= 0 or discriminant < 0:
        return Interval(estimate, -math.inf, math.inf, n)
    root = math.sqrt(discriminant)
    low, high = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    low_db = to_db * math.log(low) if low > 0 else -math.inf
    return Interval(estimate, min(low_db, estimate), max(to_db * math.log(high), estimate), n)


def bootstrap(statistic, columns: dict[str, list[float]]) -> Interval:
    """`statistic(sums)` of per-sample values summed over the samples (a dict of sums by column), with
    its percentile bootstrap interval over the samples (fixed seed: reproducible)."""
    data = {key: np.asarray(values, dtype=float) for key, values in columns.items()}
    n = len(next(iter(data.values()))) if data else 0
    estimate = statistic({key: float(values.sum()) for key, values in data.items()})
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, n)
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    picks = generator.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    sums = {key: values[picks].sum(axis=1) for key, values in data.items()}
    values = np.asarray([statistic({key: s[i] for key, s in sums.items()}) for i in range(BOOTSTRAP_RESAMPLES)])
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return Interval(estimate, -math.inf, math.inf, n)
    low, high = np.quantile(values, [0.025, 0.975])
    return Interval(estimate, float(min(low, estimate)), float(max(high, estimate)), n)


def cosine_of(sums: dict) -> float:
    """Cosine of the NPU path's outputs with float's, from sums of products over the samples."""
    denominator = math.sqrt(sums["ref_ref"] * sums["out_out"])
    return sums["ref_out"] / denominator if denominator else 1.0


def relative_error_of(sums: dict) -> float:
    """Relative error (Frobenius) against float, from sums of squares over the samples."""
    return math.sqrt(sums["diff_diff"] / sums["ref_ref"]) if sums["ref_ref"] else math.nan
