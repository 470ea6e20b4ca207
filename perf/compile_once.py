"""Compile once per TOSA profile, Vela per cell: what it saves, on the same machine in one run.

    uv run python perf/compile_once.py                    # both parts, ~35 minutes on 2 cores
    uv run python perf/compile_once.py --part default     # the default matrix, before / after
    uv run python perf/compile_once.py --part design      # the design-space sweep
    uv run python perf/compile_once.py --smoke            # both parts on mnist and add, a few targets: minutes

Part 1, the default matrix cold (config/config.yaml as a new user runs it), twice from empty
results: with the workflow as it was before compile-once (`--before`, the last commit that lowered
every cell with Vela inside ExecuTorch's lowering, checked out into a temporary directory) and with
this checkout. Prints both times and their ratio, then checks that nothing was done less: every
cell's .pte is byte-identical between the two runs, and `ethosweep compare` of the two summaries
finds no cycle, size or accuracy delta.

Part 2, a design-space sweep: 3 models (mnist, resnet8, mobilenet_v1_025) x all 11 Ethos-U
configurations x every memory mode Vela accepts for each (U55: 2, U65 and U85: 6; 50 cells a
model). A first run with one cell per (model, TOSA profile) lowers, quantizes and verifies
everything the cells share; then the full space is added and timed: the marginal cost of a cell
whose profile is already lowered. Against it: Vela alone, the `vela` command on every partition
of the same cells with the same flags, as many at a time as the sweep's --cores. Prints both per
cell and their ratio.

Vela's cycle counts are compiler estimates; here they only serve as a fingerprint of the work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ethosweep.cli import compare  # noqa: E402
from ethosweep.compile.compile_spec import vela_flags  # noqa: E402
from ethosweep.matrix.expand import build_sweep  # noqa: E402
from ethosweep.matrix.targets import TARGETS  # noqa: E402
from ethosweep.results.table import read_summary_csv  # noqa: E402
from workdirs import make_workdir, run_all, snakemake, timed, warm_page_cache, write_config  # noqa: E402

# The last commit whose workflow lowered every cell on its own (lower_to_pte, then run_vela).
BEFORE = "3bfdf9e"
DESIGN_MODELS = ("mnist", "resnet8", "mobilenet_v1_025")
ALL_MEMORY_MODES = [
    "Shared_Sram",
    "Sram_Only",
    "Dedicated_Sram",
    "Dedicated_Sram_256KB",
    "Dedicated_Sram_384KB",
    "Dedicated_Sram_512KB",
]


# --smoke: the same parts, steps and checks on a small matrix
SMOKE_MODELS = ("mnist", "add")
SMOKE_TARGETS = ["ethos-u55-128", "ethos-u85-256"]
SMOKE_DESIGN_TARGETS = ["ethos-u55-64", "ethos-u55-128", "ethos-u65-256", "ethos-u85-256", "ethos-u85-512"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["default", "design", "both"], default="both")
    parser.add_argument("--smoke", action="store_true", help="both parts on a small matrix (the tests run this)")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    args = parser.parse_args(argv)
    warm_page_cache()  # the side timed first must not read torch from disk for the other
    root = args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-compile-once-"))
    root.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; python {platform.python_version()}; "
        f"--cores {args.cores}; workdir {root}\n",
        flush=True,
    )
    failed = False
    if args.part in ("default", "both"):
        failed |= default_matrix(root, args.cores, args.before, args.smoke)
    if args.part in ("design", "both"):
        failed |= design_space(root, args.cores, args.smoke)
    return 1 if failed else 0


def smaller(config: dict) -> dict:
    """--smoke: a side's own default config on SMOKE_MODELS x SMOKE_TARGETS in Shared_Sram, no boards."""
    return dict(
        config,
        models=[m for m in config["models"] if m["name"] in SMOKE_MODELS],
        targets=SMOKE_TARGETS,
        memory_modes=["Shared_Sram"],
        boards=[],
        cpu_targets=[],
    )


# ---- part 1: the default matrix, before and after ---------------------------------------------


def default_matrix(root: Path, cores: int, before: str, smoke: bool = False) -> bool:
    shrink = smaller if smoke else (lambda config: config)
    config = shrink(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    sweep = build_sweep(config, REPO)
    print(f"default matrix: {sweep.describe().removeprefix('ethosweep: ')}", flush=True)
    old_src = checkout(before, root / "before-src")
    # each side runs its own default config (the numerics section gained keys since); same matrix
    old_config = shrink(yaml.safe_load((old_src / "config" / "config.yaml").read_text()))
    assert [c.id for c in build_sweep(old_config, REPO).cells] == [c.id for c in sweep.cells]
    old = make_workdir(root / "before", old_config)
    new = make_workdir(root / "after", config)
    before_s = timed(f"before ({before}), cold", lambda: snakemake(old, cores, old_src, cold=True))
    after_s = timed("after (this checkout), cold", lambda: snakemake(new, cores, REPO, cold=True))
    print(f"after / before                    {after_s / before_s:6.2f}   (target <= 0.45 on the default matrix)")

    problems = []
    for cell in sweep.cells:
        old_pte, new_pte = old / "results/lower" / cell.id / "model.pte", new / "results/vela" / cell.id / "model.pte"
        if not old_pte.is_file() or old_pte.read_bytes() != new_pte.read_bytes():
            problems.append(f"{cell.id}: the .pte differs")
    result = compare(read_summary_csv(old / "results/summary.csv"), read_summary_csv(new / "results/summary.csv"))
    # The verify stage now evaluates a model without data on as many random inputs as its thresholds
    # need (ethosweep.verify.verdicts), so its error in steps is measured on more samples: not compared.
    # And the summary's times kept four decimals, now at least three significant figures (a cell of a
    # few cycles was 0.0 ms): compared at the old precision.
    changed = [
        (key, {k: v for k, v in deltas.items() if k != "error steps" and not _same_ms_then(k, *v)})
        for key, deltas in result["changed"]
    ]
    changed = [(key, deltas) for key, deltas in changed if deltas]
    problems += [f"{' / '.join(k for k in key if k)}: {deltas}" for key, deltas in changed]
    problems += [f"only before: {key}" for key in result["only_a"]] + [f"only after: {key}" for key in result["only_b"]]
    if problems:
        print("DIFFERENT RESULTS:\n  " + "\n  ".join(problems))
        return True
    print(
        f"same results: all {len(sweep.cells)} cells' .pte files byte-identical; `ethosweep compare`: no Vela "
        f"cycle, time, SRAM, .pte size, top-1 or status delta in {len(read_summary_csv(new / 'results/summary.csv'))} "
        "summary rows (error steps aside: measured on more samples now)\n",
        flush=True,
    )
    return False


def _same_ms_then(label: str, before, after) -> bool:
    """A time that differs only in digits the summary of `--before` rounded away."""
    return label == "ms" and None not in (before, after) and round(after, 4) == before


def checkout(rev: str, dest: Path) -> Path:
    """The repository at `rev`, as files (git archive: no .git, nothing to clean up)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


# ---- part 2: the design space --------------------------------------------------------------


def design_space(root: Path, cores: int, smoke: bool = False) -> bool:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    models = [m for m in default["models"] if m["name"] in (("mnist",) if smoke else DESIGN_MODELS)]
    base = dict(
        default,
        models=models,
        boards=[],
        cpu_targets=[],
        include=[],
        exclude=[],
        numerics=dict(default["numerics"], bundleio=False),
    )
    shared = dict(base, targets=["ethos-u55-128", "ethos-u85-256"], memory_modes=["Shared_Sram"])
    full = dict(base, targets=SMOKE_DESIGN_TARGETS if smoke else list(TARGETS), memory_modes=ALL_MEMORY_MODES)
    first, space = build_sweep(shared, REPO), build_sweep(full, REPO)
    new_cells = [c for c in space.cells if c.id not in {f.id for f in first.cells}]
    print(f"design space: {space.describe().removeprefix('ethosweep: ')}", flush=True)

    work = make_workdir(root / "design", shared)
    first_name = f"first: one cell per (model, TOSA profile), {len(first.cells)} cells"
    timed(first_name, lambda: snakemake(work, cores, REPO, cold=True))
    write_config(work, full)
    # as a user adding to a finished run: with the warm worker that run left (it outlives it by
    # its idle timeout, ethosweep.runtime.worker)
    sweep_s = timed(f"then: the whole space, {len(new_cells)} new cells", lambda: snakemake(work, cores, REPO))
    commands = vela_commands(work, new_cells, root / "vela-alone")
    vela_s = timed(f"Vela alone on the new cells' partitions, {cores} at a time", lambda: run_all(commands, cores))
    per_cell, per_vela = sweep_s / len(new_cells), vela_s / len(new_cells)
    print(
        f"marginal cost of a cell           {per_cell:6.2f} s wall (every job of the cell, and its share "
        "of the summary and report)"
    )
    print(f"Vela alone, per cell              {per_vela:6.2f} s wall")
    print(f"cell / Vela alone                 {per_cell / per_vela:6.2f}   (target <= 1.5)")

    bad = different_from_vela_alone(work, new_cells, root / "vela-alone")
    if bad:
        print("CELLS THAT DIFFER FROM VELA ALONE:\n  " + "\n  ".join(bad))
        return True
    print(f"all {len(space.cells)} cells compiled, each partition's Vela cycles equal to Vela alone's\n", flush=True)
    return False


def different_from_vela_alone(work: Path, cells, out: Path) -> list[str]:
    """Cells whose partitions ethosweep's Vela job estimated otherwise than the same Vela with the same
    flags on the same TOSA, alone (none expected: the same compile, so the same figures)."""
    from ethosweep.vela.partitions import read_summary

    problems = []
    for cell in cells:
        summary = work / "results/vela" / cell.id / "summary.json"
        if not (work / "results/vela" / cell.id / "model.pte").is_file() or not summary.is_file():
            problems.append(f"{cell.id}: not compiled")
            continue
        ours = [p["cycles_total"] for p in json.loads(summary.read_text()).get("partitions", [])]
        alone = [
            read_summary(next(part.glob("*_summary_*.csv")))["cycles_total"]
            for part in sorted((out / cell.id).iterdir(), key=lambda d: int(d.name))
        ]
        if ours != alone:
            problems.append(f"{cell.id}: Vela cycles per partition {ours}, Vela alone {alone}")
    return problems


def vela_commands(work: Path, cells, out: Path) -> list[list[str]]:
    """The `vela` command line on each partition of each cell, with the cell's flags (worked out
    before the clock starts: the flags come from ExecuTorch's compile spec, whose import takes
    seconds Vela alone does not spend)."""
    shutil.rmtree(out, ignore_errors=True)
    commands = []
    for cell in cells:
        lowered = work / "results/lower" / cell.model / cell.quant / cell.tosa_profile
        partitions = json.loads((lowered / "lower.json").read_text())["partitions"]
        flags = vela_flags(cell)
        for p in partitions:
            commands.append(
                [
                    str(Path(sys.executable).parent / "vela"),
                    str(lowered / "tosa" / p["tosa"]),
                    *flags,
                    f"--output-dir={out / cell.id / str(p['index'])}",
                    "--verbose-performance",
                ]
            )
    return commands


if __name__ == "__main__":
    sys.exit(main())
