"""A zoo preset as a sweep: cells per hour on this machine, what compiled and what did not, and the
share of operators on the NPU per target.

    uv run python perf/zoo.py --preset attention            # config/zoos/attention.yaml
    uv run python perf/zoo.py --preset mobile_classifiers   # config/zoos/mobile_classifiers.yaml
    uv run python perf/zoo.py --preset mobile_classifiers --quantization a16w8 \
        --targets ethos-u55-128 ethos-u65-256                     # the cells Vela refuses, and their cost
    uv run python perf/zoo.py --smoke                       # multihead_attention, int8, U55 and U85, and a
                                                                  # residual block Vela refuses (the tests)
    uv run python perf/zoo.py --preset mobile_classifiers --peer both   # side by side with the seeds' way
    uv run python perf/zoo.py --smoke --peer parallel                   # the same, small (the tests)

Runs `snakemake --cores N --configfile config/zoos/<preset>.yaml` from empty results in a working
directory of its own, as a user would, then reads what the sweep wrote: results/summary.csv (each
cell ok, partly delegated or failed, with its reason), results/operators.csv and
results/operator_models.csv (the operator map), and each cell that fell back its record (what
locating and falling back cost, against the profile's lowering). Prints the figures and the map's
top rows; fails if the run failed, if a cell failed without a reason, if a fallback has no costs
recorded, or if the map is missing a model the sweep lowered.

`--quick`: then the same cells again from empty results with `numerics.verify: false` (an
exploratory sweep: every row "not verified", checked), timed against both.

`--peer parallel|both`: side by side with the seeds' way in the same run. First the seeds' way,
`aot_arm_compiler --delegate --quantize` per cell (perf/peer.py; calibrated on the same samples),
--cores at a time (`both`: also one after another), then ethosweep cold on the same cells, each
side after the same untimed import of torch and ExecuTorch (a warm page cache for both). The cells
are the preset's int8 ones (aot_arm_compiler quantizes Ethos-U targets as int8 only). Prints the
ratios, ethosweep's job-seconds per stage, and fails unless every cell's program is the same on
both sides (perf/peer.compare_work).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ethosweep.matrix.expand import build_sweep  # noqa: E402
from ethosweep.matrix.targets import tosa_profile  # noqa: E402
from ethosweep.results.operators import format_top  # noqa: E402
from ethosweep.results.table import COMPILED  # noqa: E402
from peer import (  # noqa: E402
    compare_work,
    peer_cells,
    run_peer,
    same_work_line,
    stage_seconds,
    undelegated_by_peer,
    write_peer_models,
)
from workdirs import own_workers, run_snakemake, snakemake_command, timed, warm_page_cache  # noqa: E402

# the attention preset's cheapest model to lower (9 s a profile here, tiny_vit 65 s): the smoke
# checks that the benchmark reaches its verdict, the preset's runs measure
SMOKE_MODEL = "multihead_attention"
SMOKE_REFUSED = {"name": "residual", "file": "tests/models/residual_int16.py"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="attention", help="a config/zoos/<name>.yaml")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_MODEL}, int8, U55 and U85")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    parser.add_argument("--quantization", nargs="+", help="only these schemes of the preset")
    parser.add_argument("--targets", nargs="+", help="only these targets of the preset")
    parser.add_argument("--models", nargs="+", help="only these models of the preset")
    parser.add_argument(
        "--peer",
        choices=["none", "parallel", "both"],
        default="none",
        help="side by side with aot_arm_compiler per cell: --cores at a time, or that and one after another",
    )
    parser.add_argument(
        "--quick", action="store_true", help="also the same sweep without verification (numerics.verify: false)"
    )
    args = parser.parse_args(argv)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-zoo-"))
    preset = REPO / "config" / "zoos" / f"{'attention' if args.smoke else args.preset}.yaml"
    config = yaml.safe_load(preset.read_text())
    if args.smoke:
        # an attention block, and a residual block Vela refuses in a16w8 on Ethos-U55 (its fallback's cost)
        config = dict(
            config,
            models=[m for m in config["models"] if m["name"] == SMOKE_MODEL] + [SMOKE_REFUSED],
            targets=["ethos-u55-128", "ethos-u85-256"],
            quantization=["int8"],
            include=[
                {"model": "residual", "quantization": "a16w8", "target": "ethos-u55-128", "memory_mode": "Shared_Sram"}
            ],
        )
    if args.quantization:
        config["quantization"] = args.quantization
    if args.targets:
        config["targets"] = args.targets
    if args.models:
        config["models"] = [m for m in config["models"] if m["name"] in args.models]
    if args.peer != "none":
        # the cells both sides compile: aot_arm_compiler quantizes Ethos-U targets as int8 only
        models = [m for m in config["models"] if m is not SMOKE_REFUSED]
        config = dict(config, models=models, quantization=["int8"], include=[])
    work = zoo_workdir(root / "sweep", config)
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; python {platform.python_version()}; "
        f"--cores {args.cores}; preset {preset.name}{' (smoke)' if args.smoke else ''}; workdir {work}",
        flush=True,
    )
    warm_page_cache()
    peer_times, peer_failed, compared = {}, {}, []
    if args.peer != "none":
        swept = build_sweep(config, work)
        compared, left_out = peer_cells(swept)
        if left_out:
            print("not compared (the seeds' way cannot):\n  " + "\n  ".join(left_out))
        write_peer_models(root / "peer", swept, compared)
        print(f"the seeds' way, aot_arm_compiler per cell on {len(compared)} cells:")
        for workers in [1, args.cores] if args.peer == "both" else [args.cores]:
            peer_times[workers] = timed(
                peer_label(workers), lambda w=workers: peer_failed.update(run_peer(root / "peer" / f"{w}", compared, w))
            )
    proc, seconds = run_sweep("ethosweep cold", work, args.cores)
    quick = None
    if args.quick:
        quick_config = dict(config, numerics={**config.get("numerics", {}), "verify": False})
        quick = run_sweep(
            "ethosweep cold, numerics.verify: false", zoo_workdir(root / "quick", quick_config), args.cores
        )
    summary = work / "results" / "summary.csv"
    if proc.returncode != 0 or not summary.exists():
        # a cell that fails for a reason of its own is recorded and the run still succeeds: a
        # failed run is a job that may not recur (memory, a time limit), and measures nothing
        print(f"the sweep failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return 1
    rows = list(csv.DictReader(open(summary, newline="")))
    cells = {r["cell"]: r for r in rows}
    # compiled but the device cannot run it ("will not load", "will not run") is neither ok nor failed
    status = Counter(
        r["status"]
        if r["status"] in COMPILED[1:]
        else "failed"
        if r["status"] != "ok"
        else "partial"
        if r.get("delegation") == "partial"
        else "ok"
        for r in cells.values()
    )
    print(f"\n{len(cells)} cells in {seconds:.0f} s: {3600 * len(cells) / seconds:.0f} cells per hour")
    print(", ".join(f"{n} {s}" for s, n in status.most_common()))
    problems = []
    for cell, row in cells.items():
        if row["status"] != "ok":
            said = row["status"] if row["status"] in COMPILED else "failed"
            print(f"  {said}: {cell}: {row.get('reason') or 'NO REASON'}")
            if not row.get("reason"):
                problems.append(f"{cell} failed without a reason")
    models_csv = work / "results" / "operator_models.csv"
    operators_csv = work / "results" / "operators.csv"
    if not models_csv.exists() or not operators_csv.exists():
        print("the operator map was not written")
        return 1
    share: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    mapped = set()
    for row in csv.DictReader(open(models_csv, newline="")):
        share[f"{row['family']} [{row['scheme']}]"][0] += int(row["npu_ops"] or 0)
        share[f"{row['family']} [{row['scheme']}]"][1] += int(row["npu_ops"] or 0) + int(row["cpu_compute_ops"] or 0)
        mapped.add(row["model"])
    print("operators on the NPU (delegated / all compute operators of the zoo):")
    for key, (npu, total) in sorted(share.items()):
        print(f"  {key}: {npu} / {total} = {100 * npu / total:.1f} %" if total else f"  {key}: none")
    lowered = {p.parent.parent.parent.name for p in (work / "results/lower").glob("*/*/*/delegation.json")}
    if lowered - mapped:
        problems.append(f"lowered but not in the operator map: {sorted(lowered - mapped)}")
    top = format_top(list(csv.DictReader(open(operators_csv, newline=""))))
    print("what holds models back (the operator map's top rows):")
    print("\n".join(f"  {line}" for line in top) or "  nothing: every operator runs on the NPU")
    problems += print_refusal_costs(work)
    print_stage_seconds(work)
    if quick:
        problems += print_quick(root / "quick", quick, seconds, peer_times)
    if args.peer != "none":
        problems += print_side_by_side(
            work, root / "peer" / f"{args.cores}", seconds, peer_times, peer_failed, compared
        )
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    print(f"verdict: {len(cells)} cells, every failure with its reason, the map covers all {len(mapped)} models")
    return 0


def peer_label(workers: int) -> str:
    return "one after another" if workers == 1 else f"{workers} at a time"


def zoo_workdir(work: Path, config: dict) -> Path:
    """An empty working directory with the repo's models, the test models, and `config`."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "config").mkdir(parents=True)
    shutil.copytree(REPO / "models", work / "models")
    shutil.copytree(REPO / "tests" / "models", work / "tests" / "models")
    (work / "config" / "zoo.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return work


def run_sweep(name: str, work: Path, cores: int) -> tuple[subprocess.CompletedProcess, float]:
    """`snakemake --cores N --configfile config/zoo.yaml` in `work`, timed under `name`."""
    command = snakemake_command(work, cores, "--configfile", str(work / "config" / "zoo.yaml"), "--quiet", "all")
    done = []
    with own_workers() as workers:  # cold: a worker of its own, no other run's
        environment = {**os.environ, **workers}
        seconds = timed(name, lambda: done.append(run_snakemake(command, env=environment)))
    return done[0], seconds


def print_quick(work: Path, quick: tuple, verified: float, peer_times: dict) -> list[str]:
    """The exploratory sweep's figures; problems: it failed, or a row carries a verdict."""
    proc, seconds = quick
    summary = work / "results" / "summary.csv"
    if proc.returncode != 0 or not summary.exists():
        return [f"the sweep without verification failed (exit {proc.returncode}): {proc.stderr[-2000:]}"]
    verdicts = Counter(row["numerics"] for row in csv.DictReader(open(summary, newline="")))
    print(
        f"without verification (numerics.verify: false): {seconds:.0f} s = {seconds / verified:.2f}x the verified sweep"
    )
    for workers, peer in peer_times.items():
        label = peer_label(workers)
        print(f"  / the seeds' way {label:<18} {seconds / peer:6.2f}")
    if set(verdicts) != {"not verified"}:
        return [f"the sweep without verification gave verdicts: {dict(verdicts)}"]
    print(f"  numerics of its {sum(verdicts.values())} rows: all 'not verified'")
    return []


def print_stage_seconds(work: Path) -> None:
    """Where ethosweep's time went: job-seconds per stage (a job's own wall time, all jobs summed)."""
    seconds = stage_seconds(work)
    total = sum(seconds.values())
    print(f"ethosweep's job-seconds per stage ({total:.0f} s in all):")
    for rule, s in seconds.items():
        print(f"  {rule:<24} {s:8.1f} s  {100 * s / total:5.1f} %")


def print_side_by_side(work: Path, peer_dir: Path, cold: float, peer_times: dict, failed: dict, cells) -> list[str]:
    """The ratios against the seeds' way, and whether both sides compiled the same programs."""
    for workers, seconds in peer_times.items():
        label = peer_label(workers)
        print(f"ethosweep cold / the seeds' way {label:<18} {cold / seconds:6.2f}  ({cold:.0f} s / {seconds:.0f} s)")
    undelegated = undelegated_by_peer(work, peer_dir, [c for c in cells if not failed.get(c.id)])
    for cell, operators in undelegated.items():
        # less work for the seeds' way (no lowering to TOSA, no Vela): its time is in the ratio, in its favour
        print(f"  not compared: {cell}: the seeds' way delegates nothing to the NPU (left on the CPU: {operators})")
    compared = [c for c in cells if c.id not in undelegated]
    problems = compare_work(work, peer_dir, compared, failed)
    if not problems:
        print(same_work_line(compared))
    return problems


def print_refusal_costs(work: Path) -> list[str]:
    """What the cells Vela refused cost, from their records: locating (Vela runs, seconds), falling
    back (one more lowering and Vela, seconds), against the lowering every cell of the profile
    shares. Problems: a cell that fell back without its costs recorded."""
    lines, problems = [], []
    for meta in sorted((work / "results/vela").glob("*/*/*/*/*/compile.json")):
        fallback = json.loads(meta.read_text()).get("fallback")
        if not fallback:
            continue
        model, quant, target = meta.parts[-6:-3]
        cell = "/".join(meta.parts[-6:-1])
        located = fallback.get("located") or {}
        if not located.get("seconds") or not fallback.get("seconds"):
            problems.append(f"{cell} fell back without its costs recorded")
            continue
        lowered = work / "results/lower" / model / quant / tosa_profile(target) / "lower.json"
        lowering = json.loads(lowered.read_text())["seconds"]
        lines.append(
            f"  {cell}: located in {located['tries']} Vela runs{' (seeded)' if located.get('seeded') else ''}, "
            f"{located['seconds']:.1f} s; fallback "
            f"{fallback['seconds']:.1f} s = {fallback['seconds'] / lowering:.2f}x the profile's lowering "
            f"({lowering:.1f} s)"
        )
    print("cells Vela refused, kept on the CPU (vela.fallback), and what that cost:")
    print("\n".join(lines) or "  none")
    return problems


if __name__ == "__main__":
    sys.exit(main())
