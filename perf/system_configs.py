"""Is the Vela system config an axis of the sweep? What it changes, measured with Vela on real TOSA.

    uv run python perf/system_configs.py results/lower/*/int8/u55 results/lower/*/int8/u85
    uv run python perf/system_configs.py --smoke DIR...     # two targets, one model: seconds

For each lowering folder given (a profile's `tosa/` partitions, as `lower_to_tosa` writes them), Vela
(the `vela` command, ExecuTorch's flags for the cell) compiles every partition for every target of the
profile's families, every system config of that family and every memory mode Vela accepts with it.
Then, per model and target, it compares the system configs:

- the spread of the estimated inference time across system configs (max / min, same memory mode);
- whether SRAM use differs between system configs (same memory mode);
- whether the fastest memory mode, and the fastest (target, memory mode) of each NPU family, is the
  same under every system config: whether the system config changes what a user would pick.

A system config is the SoC an NPU sits in (clocks, which bus reaches which memory): a board has one.
If it scales every time by about the same factor and never changes a pick or a memory figure, the
sweep need not cross it: a board profile sets it (docs/zoos.md).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ethosweep.compile.compile_spec import vela_flags  # noqa: E402
from ethosweep.matrix import targets as tg  # noqa: E402
from ethosweep.matrix.cell import Cell  # noqa: E402

VELA = str(Path(sys.executable).with_name("vela"))


def configurations(profile: str, smoke: bool) -> list[tuple[str, str, str]]:
    """(target, system config, memory mode) for every combination Vela accepts for the profile."""
    ini = tg.read_vela_ini()
    families = ("ethos-u55", "ethos-u65") if profile == "u55" else ("ethos-u85",)
    targets = [t for t in tg.TARGETS if tg.family(t) in families]
    if smoke:
        targets = [targets[0], targets[-1]]
    found = []
    for target in targets:
        prefix = {"ethos-u55": "Ethos_U55_", "ethos-u65": "Ethos_U65_", "ethos-u85": "Ethos_U85_"}[tg.family(target)]
        for system_config in (s for s in ini.system_configs if s.startswith(prefix)):
            for mode in ini.memory_modes:
                if tg.invalid_combination_reason(target, system_config, mode, ini) is None:
                    found.append((target, system_config, mode))
    return found


def compile_partitions(tosa: list[Path], target: str, system_config: str, mode: str) -> dict | None:
    """Vela on every partition with the cell's flags: time summed, SRAM the largest (as a cell's)."""
    time, sram = 0.0, 0.0
    for partition in tosa:
        with tempfile.TemporaryDirectory() as out:
            flags = vela_flags(Cell("model", "int8", target, system_config, mode))
            run = subprocess.run([VELA, str(partition), *flags, f"--output-dir={out}"], capture_output=True, text=True)
            summaries = list(Path(out).glob("*_summary_*.csv"))
            if run.returncode != 0 or not summaries:
                return None
            with open(summaries[0]) as f:
                row = next(csv.DictReader(f))
            time += float(row["inference_time"])
            sram = max(sram, float(row["sram_memory_used"]))
    return {"time_ms": time * 1e3, "sram_kib": sram}


def measure(folder: Path, smoke: bool, jobs: int) -> list[dict]:
    tosa = sorted((folder / "tosa").glob("partition_*.tosa"))
    profile = folder.name
    combos = configurations(profile, smoke)
    with ThreadPoolExecutor(jobs) as pool:
        results = pool.map(lambda c: compile_partitions(tosa, *c), combos)
    model = folder.parents[1].name
    return [
        {"model": model, "target": t, "system_config": s, "memory_mode": m, **r}
        for (t, s, m), r in zip(combos, results)
        if r is not None
    ]


def judge(rows: list[dict]) -> dict:
    """The figures the decision rests on (see the module docstring)."""
    spreads, sram_differs, same_mode_pick, same_family_pick = [], 0, [], []
    key = lambda r: (r["model"], r["target"], r["memory_mode"])  # noqa: E731
    for _, group in itertools.groupby(sorted(rows, key=key), key=key):
        group = list(group)
        if len(group) > 1:
            times = [r["time_ms"] for r in group]
            spreads.append(max(times) / min(times))
            sram_differs += len({r["sram_kib"] for r in group}) > 1
    by_target = lambda r: (r["model"], r["target"])  # noqa: E731
    for _, group in itertools.groupby(sorted(rows, key=by_target), key=by_target):
        group = list(group)
        systems = {r["system_config"] for r in group}
        # the memory modes every system config takes (U65_Embedded has no dedicated SRAM)
        modes = set.intersection(*({r["memory_mode"] for r in group if r["system_config"] == s} for s in systems))
        picks = {
            min(
                (r for r in group if r["system_config"] == s and r["memory_mode"] in modes), key=lambda r: r["time_ms"]
            )["memory_mode"]
            for s in systems
        }
        same_mode_pick.append(len(picks) == 1)
    by_family = lambda r: (r["model"], tg.family(r["target"]))  # noqa: E731
    for _, group in itertools.groupby(sorted(rows, key=by_family), key=by_family):
        group = list(group)
        systems = {r["system_config"] for r in group}
        common = set.intersection(
            *({(r["target"], r["memory_mode"]) for r in group if r["system_config"] == s} for s in systems)
        )
        picks = {
            min(
                (r for r in group if r["system_config"] == s and (r["target"], r["memory_mode"]) in common),
                key=lambda r: r["time_ms"],
            )[k]
            for s in systems
            for k in ("target",)
        }
        same_family_pick.append(len(picks) == 1)
    return {
        "compilations": len(rows),
        "time_spread_median": round(statistics.median(spreads), 2) if spreads else None,
        "time_spread_max": round(max(spreads), 2) if spreads else None,
        "sram_differs": f"{sram_differs} of {len(spreads)}",
        "same_fastest_memory_mode": f"{sum(same_mode_pick)} of {len(same_mode_pick)} (model, target)",
        "same_fastest_target": f"{sum(same_family_pick)} of {len(same_family_pick)} (model, NPU family)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lowerings", nargs="+", type=Path, help="results/lower/<model>/<scheme>/<profile> folders")
    parser.add_argument("--smoke", action="store_true", help="two targets a profile: seconds")
    parser.add_argument("--jobs", type=int, default=2, help="Vela runs at once")
    parser.add_argument("--json", type=Path, help="write every compilation's figures here")
    args = parser.parse_args()
    rows = [row for folder in args.lowerings for row in measure(folder, args.smoke, args.jobs)]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    verdict = judge(rows)
    for key, value in verdict.items():
        print(f"{key}: {value}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
