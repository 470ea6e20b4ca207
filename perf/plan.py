"""How long Snakemake takes to plan a large matrix: 4,000 cells (the default config's models
cycled to 40, every Ethos-U target, six memory modes, int8 and a16w8), from empty results; and
with `--noop`, how long a run takes that finds all of them finished.

    uv run python perf/plan.py                    # 4,000 cells (target: under 30 s)
    uv run python perf/plan.py --smoke            # 4 models x 2 U55 targets x 2 modes x 2 schemes
    uv run python perf/plan.py --noop             # then runs them (~25 minutes on 2 cores) and
                                                        # times a no-op run (target: under 30 s)
    uv run python perf/plan.py --smoke --noop     # the same on the small matrix (the tests)

Times `snakemake --dry-run` in a working directory of its own (the workflow's own profile, as a
user runs it), three times, and prints the cells, the jobs planned and min/median/max seconds.
Fails if the plan is not the matrix: a Vela job per cell, one lowering per model, scheme and
TOSA profile.

`--noop` cycles the default config's two smallest models (add, softmax) instead of all of them, so
that running 4,000 cells fits in a session: what a no-op run costs is the jobs' count and their
files, not what the models compute. It runs the matrix once (`--cores 2`, timed for the record),
then times `snakemake --cores 2` on the finished results three times; each must say "Nothing to be
done".
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
from ethosweep.matrix.expand import build_sweep  # noqa: E402
from ethosweep.matrix.targets import TARGETS  # noqa: E402
from workdirs import make_workdir, snakemake, snakemake_command, timed  # noqa: E402

TARGET_SECONDS = 30


NOOP_MODELS = ("add", "softmax")  # the default config's quickest to compile


def large_matrix(models: int, targets: list[str], modes: list[str], only: tuple[str, ...] = ()) -> dict:
    """The default config with its models (`only` those named) cycled to `models` (renamed: each
    its own chain)."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    pool = [m for m in default["models"] if not only or m["name"] in only]
    cycled = []
    for i in range(models):
        model = copy.deepcopy(pool[i % len(pool)])
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


def no_op(work: Path) -> float:
    """Seconds of one `snakemake --cores 2` run on finished results; it must find nothing to do."""
    started = time.perf_counter()
    proc = subprocess.run(snakemake_command(work, 2, "all"), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or "Nothing to be done" not in proc.stdout + proc.stderr:
        raise SystemExit(f"the no-op run did something or failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return seconds


def min_median_max(seconds: list[float]) -> str:
    return f"min {min(seconds):.1f} s, median {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a small matrix, the same steps and checks")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--noop", action="store_true", help="then run the matrix and time a no-op run of it")
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    args = parser.parse_args(argv)
    only = NOOP_MODELS if args.noop else ()
    if args.smoke:
        # two targets of one TOSA profile: 32 cells on 8 lowerings (4 models x 2 schemes), half the
        # lowerings two profiles would cost the tests, and a plan that lowered per cell still shows
        config = large_matrix(4, ["ethos-u55-64", "ethos-u55-128"], ["Shared_Sram", "Sram_Only"], only)
    else:
        config = large_matrix(40, list(TARGETS), ALL_MEMORY_MODES, only)
    sweep = build_sweep(config, REPO)
    work = make_workdir((args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-plan-"))) / "plan", config)
    print(f"machine: {platform.node()}; python {platform.python_version()}; {sweep.describe().split(';')[0]}")
    runs = [planned(work) for _ in range(args.repeat)]
    seconds = [s for s, _ in runs]
    jobs = runs[0][1]
    print(f"jobs planned: {sum(jobs.values())} ({', '.join(f'{k} {v}' for k, v in jobs.items())})")
    print(
        f"plan (snakemake --dry-run) {min_median_max(seconds)}, {len(sweep.cells)} cells "
        f"(target: under {TARGET_SECONDS} s for 4,000)"
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
    print(f"verdict: the plan is the matrix, {len(sweep.cells)} cells", flush=True)
    if args.noop:
        timed(f"the matrix run, --cores 2 ({', '.join(NOOP_MODELS)} cycled)", lambda: snakemake(work, 2, cold=True))
        rows = sum(1 for _ in open(work / "results" / "summary.csv")) - 1
        noops = [no_op(work) for _ in range(args.repeat)]
        print(f"no-op run (snakemake --cores 2, nothing to be done) {min_median_max(noops)}, {rows} summary rows")
        print(f"verdict: a no-op run of {len(sweep.cells)} finished cells, {statistics.median(noops):.1f} s median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
