"""The order jobs start in, on a config's real DAG: the run's wall time and when half its cells have
their Vela result, in the rules' order and in the order a run takes (ethosweep.runtime.estimate
.chain_first), for several core counts. Scheduled as Snakemake's greedy scheduler does, on each
job's estimated cost (the figures the run's first line uses): arithmetic on measured costs, not a run.

    uv run python perf/order.py                                                  # the default matrix
    uv run --extra zoos python perf/order.py --configfile config/zoos/deployed.yaml  # the deployed zoo
    uv run python perf/order.py --smoke                                          # the tests: 4 models

Plans the config in an empty working directory of its own (so every cost comes from the project's
table of measured costs or the default stage costs, as on a fresh clone), with ETHOSWEEP_PLAN_TO set:
the run writes its planned jobs and stops before running any. Fails unless the order a run takes is
never longer than the rules' order.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ethosweep.runtime.estimate import PLAN_TO, Job, chain_first, duration, ends  # noqa: E402
from workdirs import make_workdir, snakemake_command  # noqa: E402

CORES = (2, 4, 8, 16)
RESULTS = "compile_with_vela"  # a cell's answer: does it fit, how fast
SMOKE_MODELS = ("add", "mnist", "ds_cnn", "mobilenet_v2")


def planned(config: dict) -> tuple[list[Job], list[float], float]:
    """The jobs a run of `config` would run, their costs, and the rule priority of the exports."""
    with tempfile.TemporaryDirectory(prefix="ethosweep-order-") as folder:
        work = make_workdir(Path(folder) / "work", config)
        shutil.copytree(REPO / "config" / "zoos", work / "config" / "zoos")  # presets' `from:`
        plan = Path(folder) / "plan.json"
        env = {**os.environ, PLAN_TO: str(plan)}
        done = subprocess.run(snakemake_command(work, 8, "all"), env=env, capture_output=True, text=True)
        if done.returncode != 0 or not plan.exists():
            raise SystemExit(f"planning failed:\n{done.stderr[-4000:]}")
        found = json.loads(plan.read_text())
    jobs = [Job(j["stage"], None, priority=j["priority"], needs=j["needs"]) for j in found["jobs"]]
    return jobs, [j["seconds"] for j in found["jobs"]], found["first"]


def half_the_cells(jobs: list[Job], ended: list[float]) -> float:
    return statistics.median(ended[i] for i, job in enumerate(jobs) if job.stage == RESULTS)


def compare(jobs: list[Job], costs: list[float], first: float) -> list[dict]:
    rows = []
    for cores in CORES:
        rules = ends(jobs, costs, cores, [job.priority for job in jobs])
        priorities, seconds = chain_first(jobs, costs, cores, RESULTS, first)
        chosen = ends(jobs, costs, cores, priorities)
        rows.append(
            {
                "cores": cores,
                "rules' order": max(rules),
                "half the cells, rules' order": half_the_cells(jobs, rules),
                "chain first": seconds,
                "half the cells, chain first": half_the_cells(jobs, chosen),
                "work over the cores": sum(costs) / cores,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--smoke", action="store_true", help=f"the default matrix's {', '.join(SMOKE_MODELS)}")
    args = parser.parse_args(argv)
    config = yaml.safe_load(args.configfile.read_text())
    if args.smoke:
        config = {**config, "models": [m for m in config["models"] if m.get("name") in SMOKE_MODELS]}
    jobs, costs, first = planned(config)
    print(
        f"{len(jobs):,} jobs, {sum(costs):,.0f} CPU-seconds ({args.configfile.name}{', smoke' if args.smoke else ''})"
    )
    rows = compare(jobs, costs, first)
    print("\t".join(rows[0]))
    for row in rows:
        print("\t".join(str(v) if k == "cores" else duration(v) for k, v in row.items()))
    longer = [row["cores"] for row in rows if row["chain first"] > row["rules' order"] + 1e-6]
    if longer:
        print(f"FAIL: the order a run takes is longer than the rules' order on {longer} cores")
        return 1
    print("verdict: the order a run takes is never longer than the rules' order")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
