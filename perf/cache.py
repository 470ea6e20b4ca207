"""A team's second sweep with the shared store (ETHOSWEEP_CACHE, docs/cache.md): what it costs
against the first, and against the same second sweep without the store, in one run.

    uv run python perf/cache.py --preset mobile_classifiers   # config/zoos/mobile_classifiers.yaml
    uv run python perf/cache.py                               # the default matrix, config/config.yaml
    uv run python perf/cache.py --checkout                    # the default matrix again from a second
                                                                    # checkout of the same commit
    uv run python perf/cache.py --smoke                       # two small models (the tests)

Three sweeps, each from empty results in a folder of its own, one after another on the same
machine: (1) the first experiment with an empty store; (2) the second experiment (another memory
mode and a board: `--memory-modes`, `--boards`) with the store the first filled; (3) the same second
experiment without the store, as it costs today. With `--checkout` the second is the first's config
run by a clone of this checkout in another folder, as a colleague's run would be (its workflow and
library, this environment). Prints the wall times and the ratios, which jobs the store served, and
fails unless the second experiment's programs are byte for byte those of its run without the
store, with the same verdicts.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workdirs import REPO, make_workdir, snakemake, timed, warm_page_cache  # noqa: E402

SMOKE = {
    "models": [
        {"name": "mnist", "file": "models/mnist.py"},
        {
            "name": "add",
            "import": "executorch.examples.models.toy_model:AddModule",
            "inputs": [{"shape": [1]}, {"shape": [1]}],
        },
    ],
    "targets": ["ethos-u55-128", "ethos-u85-256"],
    "memory_modes": ["Shared_Sram"],
    "numerics": {"evaluation_samples": 100},
    "cpu_targets": [],
}
# the logs of the rules that use the store (not verify_fallbacks', not the CPU-only summary's)
CACHED = ("export/*.log", "train/*.log", "quantize/**/*.log", "lower/**/*.log", "verify/**/*.log", "cpu/**/lower.log")


def first_config(args) -> dict:
    if args.smoke:
        return SMOKE
    path = REPO / ("config/config.yaml" if args.preset is None else f"config/zoos/{args.preset}.yaml")
    return yaml.safe_load(path.read_text())


def second_config(first: dict, args) -> dict:
    """The second experiment: another memory mode and board on the same zoo."""
    return {**first, "memory_modes": args.memory_modes, "boards": args.boards}


def served(workdir: Path) -> tuple[int, int]:
    """(jobs of the rules that use the store, those it served), from their logs."""
    logs = [p for pattern in CACHED for p in (workdir / "logs").glob(pattern) if ".fallbacks" not in p.name]
    hits = [p for p in logs if "ethosweep: taken from the cache: " in p.read_text(errors="replace")]
    return len(logs), len(hits)


def same_work(ours: Path, theirs: Path) -> str:
    """Every .pte and verdict of `ours` equal to `theirs`'; the verdict line, or an exit."""
    ptes = sorted((theirs / "results" / "vela").rglob("model.pte"))
    differing = [p for p in ptes if (ours / p.relative_to(theirs)).read_bytes() != p.read_bytes()]
    rows = {}
    for side in (ours, theirs):
        with open(side / "results" / "summary.csv", newline="") as f:
            rows[side] = [
                (r["cell"], r.get("board", ""), r["status"], r["numerics"], r["pte_sha256"]) for r in csv.DictReader(f)
            ]
    if differing or rows[ours] != rows[theirs] or not ptes:
        raise SystemExit(
            f"not the same work: {len(differing)} of {len(ptes)} programs differ; summaries equal: "
            f"{rows[ours] == rows[theirs]}"
        )
    return f"same work: all {len(ptes)} programs byte-identical and {len(rows[ours])} rows' verdicts equal"


def clone_checkout(folder: Path) -> Path:
    """A second checkout of this commit in another folder: its workflow and its library run (with
    this environment: the same lockfile), as a colleague's checkout would."""
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(folder)], check=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=None, help="a zoo preset in config/zoos/ (default: config/config.yaml)")
    parser.add_argument("--memory-modes", nargs="+", default=["Sram_Only"], help="the second experiment's")
    parser.add_argument("--boards", nargs="+", default=["corstone-300"], help="the second experiment's")
    parser.add_argument("--checkout", action="store_true", help="the second run: the same config, another checkout")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="two small models, U55 and U85 (the tests)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the folders here (default: a temp dir)")
    args = parser.parse_args(argv)

    base = args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-cache-"))
    store = base / "store"
    shutil.rmtree(store, ignore_errors=True)
    first = first_config(args)
    second = first if args.checkout else second_config(first, args)
    source = clone_checkout(base / "checkout") if args.checkout else REPO
    print(f"{platform.node()}, {os.cpu_count()} cores, --cores {args.cores}; store {store}")
    warm_page_cache()

    os.environ["ETHOSWEEP_CACHE"] = str(store)
    one = make_workdir(base / "first", first)
    t_first = timed("first experiment (empty store)", lambda: snakemake(one, args.cores, cold=True))
    two = make_workdir(base / "second", second)
    what = "the same config from a second checkout" if args.checkout else "second experiment"
    t_second = timed(f"{what} (with the store)", lambda: snakemake(two, args.cores, source=source, cold=True))
    del os.environ["ETHOSWEEP_CACHE"]
    alone = make_workdir(base / "alone", second)
    t_alone = timed(f"{what} without the store", lambda: snakemake(alone, args.cores, cold=True))

    jobs, hits = served(two)
    print(f"  the store served {hits} of {jobs} export/quantize/lower/verify jobs of the second run")
    print(f"  second / first             {t_second / t_first:6.2f}")
    print(f"  second / without the store {t_second / t_alone:6.2f}")
    print(f"  {same_work(two, alone)}")
    if hits != jobs:
        raise SystemExit("the store did not serve every job it holds the result of")
    return 0


if __name__ == "__main__":
    sys.exit(main())
