"""How long Snakemake takes to plan a large matrix: 4,000 cells (the default config's models
cycled to 40, every Ethos-U target, six memory modes, int8 and a16w8), from empty results.

    uv run python benchmarks/plan.py            # 4,000 cells (target: under 30 s)
    uv run python benchmarks/plan.py --smoke    # 4 models x 2 targets x 2 modes x 2 schemes (the tests)

Times `snakemake --dry-run` in a working directory of its own (the workflow's own profile, as a
user runs it), three times, and prints the cells, the jobs planned and min/median/max seconds.
Fails if the plan is not the matrix: a Vela job per cell, one lowering per model, scheme and
TOSA profile.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_once import ALL_MEMORY_MODES  # noqa: E402
from ethosweep.matrix.config import build_sweep  # noqa: E402
from ethosweep.matrix.targets import TARGETS  # noqa: E402
from workdirs import make_workdir, snakemake_command  # noqa: E402

TARGET_SECONDS = 30


def large_matrix(models: int, targets: list[str], modes: list[str]) -> dict:
    """The default config with its models cycled to `models` (renamed: each its own chain)."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cycled = []
    for i in range(models):
        model = copy.deepcopy(default["models"][i % len(default["models"])])
        cycled.append(dict(model, name=f"{model['name']}_{i}"))
    return dict(
        default,
        models=cycled,
        targets=targets,
        memory_modes=modes,
        quantization=["int8", "a16w8"],
        boards=[],
        cpu_targets=[],
        include=[],
        exclude=[],
    )


def planned(work: Path) -> tuple[float, dict[str, int]]:
    """(seconds, jobs by rule) of one dry run."""
    started = time.perf_counter()
    proc = subprocess.run(
        snakemake_command(work, 2, "--dry-run", "--quiet", "rules", "all"), capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the dry run failed:\n{proc.stderr[-4000:]}")
    stats = (proc.stdout + proc.stderr).split("Job stats:")[1].splitlines()[3:]
    jobs = {}
    for line in stats:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return seconds, jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a small matrix, the same steps and checks")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.smoke:
        config = large_matrix(4, ["ethos-u55-128", "ethos-u85-256"], ["Shared_Sram", "Sram_Only"])
    else:
        config = large_matrix(40, list(TARGETS), ALL_MEMORY_MODES)
    sweep = build_sweep(config, REPO)
    work = make_workdir((args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-plan-"))) / "plan", config)
    print(f"machine: {platform.node()}; python {platform.python_version()}; {sweep.describe().split(';')[0]}")
    runs = [planned(work) for _ in range(args.repeat)]
    seconds = [s for s, _ in runs]
    jobs = runs[0][1]
    print(f"jobs planned: {sum(jobs.values())} ({', '.join(f'{k} {v}' for k, v in jobs.items())})")
    print(
        f"plan (snakemake --dry-run) min {min(seconds):.1f} s, median {statistics.median(seconds):.1f} s, "
        f"max {max(seconds):.1f} s, {len(sweep.cells)} cells (target: under {TARGET_SECONDS} s for 4,000)"
    )
    lowerings = {(c.model, c.quant, c.tosa_profile) for c in sweep.cells}
    problems = []
    if jobs.get("compile_with_vela") != len(sweep.cells):
        problems.append(f"{jobs.get('compile_with_vela')} Vela jobs planned for {len(sweep.cells)} cells")
    if jobs.get("lower_to_tosa") != len(lowerings):
        problems.append(f"{jobs.get('lower_to_tosa')} lowerings planned for {len(lowerings)} (model, scheme, profile)")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    print(f"verdict: the plan is the matrix, {len(sweep.cells)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
