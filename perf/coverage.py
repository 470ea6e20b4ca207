"""The coverage of every interval the numerics verdicts use, at every n they use, measured precisely.

    uv run python perf/coverage.py                 # 5,000 simulated samples a cell: ~20 minutes
    uv run python perf/coverage.py --repeats 100   # a quick look

tests/test_intervals.py checks the same shapes with a few hundred samples (it fails only where the
simulation shows coverage below 93 %); this prints the coverage itself, for docs/numerics.md. The
shapes (per-input values in dB, symmetric, skewed, heavy-tailed, mostly zero, and those measured on the
presets) are the test's, so the table and the test never disagree about what was simulated.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from ethosweep.verify.intervals import geometric_mean, mean_interval, paired_difference  # noqa: E402
from test_intervals import SHAPES, SIZES  # noqa: E402


def covered(draw, truth, interval, n: int, repeats: int, seed: int) -> float:
    generator, hits, used = np.random.default_rng(seed), 0, 0
    for _ in range(repeats):
        values = draw(generator, n)
        if not np.any(values):
            continue  # every input 0: exactness is stated instead (Clopper-Pearson)
        found = interval(values)
        used += 1
        hits += found.low <= truth <= found.high
    return hits / used if used else math.nan


def rows(repeats: int) -> list[tuple[str, list[float]]]:
    table = []
    for name, (draw, truth) in SHAPES.items():
        table.append((f"mean, {name}", [covered(draw, truth, mean_interval, n, repeats, n) for n in SIZES]))
    for spread in (0.3, 1.0, 2.0):

        def draw(g, n, spread=spread):
            return g.lognormal(math.log(0.1), spread, n)

        table.append(
            (
                f"geometric mean, log-sd {spread}",
                [covered(draw, 0.1, lambda v: geometric_mean(v, 1e-9), n, repeats, n) for n in SIZES],
            )
        )
    for cells in ([0.97, 0.01, 0.01, 0.01], [0.6, 0.1, 0.1, 0.2]):

        def draw(g, n, cells=cells):
            return g.multinomial(n, cells)

        truth = cells[1] - cells[2]
        table.append(
            (
                f"paired difference, {cells}",
                [covered(draw, truth, lambda c: paired_difference(*c), n, repeats, n) for n in SIZES],
            )
        )
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5000, help="simulated samples a cell")
    args = parser.parse_args()
    table = rows(args.repeats)
    print(f"coverage of the nominal 95 % intervals, {args.repeats} simulated samples a cell")
    print("| interval, values | " + " | ".join(f"n = {n}" for n in SIZES) + " |")
    print("| --- | " + " | ".join("---:" for _ in SIZES) + " |")
    for name, values in table:
        print(f"| {name} | " + " | ".join(f"{100 * v:.1f} %" for v in values) + " |")
    lowest = min(v for _, values in table for v in values if not math.isnan(v))
    print(f"lowest: {100 * lowest:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
