"""The CPU seconds each job of a run cost, by model definition: the table a run's first line reads
(ethosweep.runtime.estimate.MEASURED_COSTS) for a model its folder has not run yet.

    uv run python perf/measured_costs.py RUN_FOLDER...            # into the package's table
    uv run python perf/measured_costs.py RUN_FOLDER... --out FILE

A folder's job logs say which job each was (their first line: the rule and the job's wildcards) and
what it cost (their last: the stage's CPU seconds); its exports say what each model is
(results/export/<model>/export.json, the definition the fingerprint is taken of). A row is a job of
one model and its first two other wildcards (a scheme and a TOSA profile; a cell's Vela job by scheme
and target, the median over its system configs and memory modes, which the table would otherwise
hold 6,000 of). Rows of the given folders replace the table's rows of the same key; the table's other
rows stay, so the zoo's parts can be run and recorded one after another.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ethosweep.runtime.estimate import JOB_OVERHEAD_SECONDS, MEASURED_COSTS, job_key, recorded_seconds  # noqa: E402

FIELDS = ("rule", "model", "fingerprint", "wildcards", "cpu_seconds")


def model_definitions(folder: Path) -> dict[str, dict]:
    """model name -> its definition, as its export recorded it."""
    found = {}
    for meta in sorted(folder.glob("results/export/*/export.json")):
        model = json.loads(meta.read_text()).get("model")
        if model:
            found[meta.parent.name] = model
    return found


def job_of_log(log: Path) -> tuple[str, list[str]] | None:
    """(rule, the job's wildcard values) from a job log's first line ('ethosweep: lower_to_tosa
    resnet8/int8/u55', ethosweep.runtime.jobs.describe_job)."""
    with open(log, errors="replace") as f:
        first = f.readline().split()
    if len(first) != 3 or first[0] != "ethosweep:":
        return None
    return first[1], first[2].split("/")


def measured_rows(folder: Path) -> list[dict]:
    """A row per rule, model and first two other wildcards of the completed jobs in `folder`: its
    fingerprint and the jobs' median CPU seconds."""
    models = model_definitions(folder)
    seconds: dict[tuple[str, str, str], list[float]] = {}
    for log in sorted(folder.glob("logs/**/*.log")):
        job = job_of_log(log)
        recorded = recorded_seconds(str(log))
        if job is None or recorded is None or job[1][0] not in models:
            continue
        rule, (model, *rest) = job
        seconds.setdefault((rule, model, "/".join(rest[:2])), []).append(recorded - JOB_OVERHEAD_SECONDS)
    return [
        {
            "rule": rule,
            "model": model,
            "fingerprint": job_key(models[model], {})[0],
            "wildcards": wildcards,
            "cpu_seconds": f"{statistics.median(times):.2f}",
        }
        for (rule, model, wildcards), times in seconds.items()
    ]


def merged(table: Path, rows: list[dict]) -> list[dict]:
    """The table's rows with `rows` in place of those of the same job."""
    key = lambda row: (row["rule"], row["fingerprint"], row["wildcards"])  # noqa: E731
    kept = {}
    if table.exists():
        with open(table, newline="") as f:
            kept = {key(row): row for row in csv.DictReader(f)}
    kept.update((key(row), row) for row in rows)
    return sorted(kept.values(), key=lambda row: (row["model"], row["rule"], row["wildcards"]))


def write_merged(table: Path, rows: list[dict]) -> list[dict]:
    """Writes `table` with `rows` in place of those of the same job (merged); returns what it wrote."""
    written = merged(table, rows)
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(written)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders (a checkout or a folder of your own)")
    parser.add_argument("--out", type=Path, default=MEASURED_COSTS, help="the table to update")
    args = parser.parse_args(argv)
    rows = [row for folder in args.folders for row in measured_rows(folder)]
    table = write_merged(args.out, rows)
    models = len({row["model"] for row in rows})
    print(f"{len(rows):,} rows of {models} models from {len(args.folders)} folder(s); {args.out}: {len(table):,} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
