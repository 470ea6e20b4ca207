"""What verification costs a run's lowered models, from one sample of each: the CPU seconds of
loading the three paths, of one sample through each (float, quantized, the NPU path on the TOSA
reference model) and of their layer-by-layer comparison; the model's GFLOPs; the verify job
projected from them, beside the job's own CPU seconds where the folder ran it.

    uv run python perf/verify_costs.py RUN_FOLDER [--samples 40] [--only MODEL ...] [--out TABLE]

Samples: what the folder's verify job ran on where it ran, else --samples. `--out` merges a row per
profile into the table a run's first line reads (perf/measured_costs.py's, by default the package's):
the job's own CPU seconds where it ran, else the projection, so that a folder's estimate counts a
zoo model's verification (minutes to hours on the reference model) before any has run.

A verify job loads the three paths, runs each on its samples (numerics.random_samples for a model
without data) and compares them layer by layer; where the NPU path differs, it runs it once more to
locate the difference: about load + samples x one sample's paths and comparison + one NPU run. Less
than a whole job costs (its metrics, the location's comparisons): whole jobs took 1.1-1.6 times it
(docs/performance.md, "Verification at the zoo's scale"). A u85 profile that
verifies what the u55 one did (ethosweep.verify.numerics.profile_verified_alike) costs nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "perf"))

from ethosweep.runtime.errors import StageError  # noqa: E402
from ethosweep.runtime.estimate import JOB_OVERHEAD_SECONDS, MEASURED_COSTS, job_key, recorded_seconds  # noqa: E402
from ethosweep.runtime.isolation import call_in_child  # noqa: E402
from ethosweep.verify.job import SAME_AS_REPORT, OtherVerification, VerifyFiles  # noqa: E402
from ethosweep.verify.numerics import ThreePaths, profile_verified_alike  # noqa: E402
from ethosweep.verify.quantization_loss import layer_report  # noqa: E402
from ethosweep.verify.reference import NpuInterpreter  # noqa: E402
from measured_costs import model_definitions, write_merged  # noqa: E402

HEADER = (
    *("model", "scheme", "profile", "samples", "GFLOPs"),
    *("load s", "float s", "quant s", "NPU s", "layers s", "projected s", "job CPU s", "error"),
)


def cpu_seconds(run) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def files_of(results: Path, model: str, scheme: str, profile: str) -> VerifyFiles:
    lowered, quantized = results / "lower" / model / scheme / profile, results / "quantize" / model / scheme / profile
    return VerifyFiles(
        program=str(results / "export" / model / "program.pt2"),
        quantized=str(quantized / "quantized.pt2"),
        inputs=str(results / "export" / model / "inputs.pt"),
        edge=str(lowered / "edge.pt2"),
        lower_meta=str(lowered / "lower.json"),
        tosa_sources=str(lowered / "tosa_sources.json"),
        report="",
        bundle_io="",
        quantize_meta=str(quantized / "quantize.json"),
        delegation=str(lowered / "delegation.json"),
    )


def verifies_what_u55_did(results: Path, model: str, scheme: str, profile: str) -> bool:
    """A u85 profile whose verification the workflow takes from the u55 one's."""
    if profile != "u85" or not (results / "lower" / model / scheme / "u55" / "edge.pt2").exists():
        return False
    u55 = files_of(results, model, scheme, "u55")
    other = OtherVerification(
        report="-", bundle_io="-", lower_meta=u55.lower_meta, tosa_sources=u55.tosa_sources, delegation=u55.delegation
    )
    return profile_verified_alike(files_of(results, model, scheme, profile), other) is not None


def one_sample(files: VerifyFiles) -> dict:
    """CPU seconds of loading and of one random sample through each path; the float model's GFLOPs."""
    started = time.process_time()
    paths = ThreePaths.load(files.program, files.quantized, files.edge, files.lower_meta)
    load = time.process_time() - started
    example = torch.load(files.inputs)
    sample = tuple(torch.randn_like(x) if x.is_floating_point() else x for x in example)
    with torch.no_grad():
        with FlopCounterMode(display=False) as flops:
            paths.float_module(*sample)
        return {
            "GFLOPs": flops.get_total_flops() / 1e9,
            "load s": load,
            "float s": cpu_seconds(lambda: paths.float_module(*sample)),
            "quant s": cpu_seconds(lambda: paths.quant_module(*sample)),
            "NPU s": cpu_seconds(lambda: NpuInterpreter(paths.npu_module).run(*sample)),
            "layers s": cpu_seconds(lambda: layer_report(paths.float_module, paths.quant_module, [sample])),
        }


def projected(measured: dict, samples: int) -> float:
    per_sample = measured["float s"] + measured["quant s"] + measured["NPU s"] + measured["layers s"]
    return measured["load s"] + samples * per_sample + measured["NPU s"]


def rows(run: Path, samples: int, only: list[str]) -> list[dict]:
    results, found = run / "results", []
    for edge in sorted(results.glob("lower/*/*/*/edge.pt2")):
        model, scheme, profile = edge.parts[-4:-1]
        if only and model not in only:
            continue
        row = {"model": model, "scheme": scheme, "profile": profile, "samples": samples}
        job = recorded_seconds(str(run / "logs" / "verify" / model / scheme / f"{profile}.log"))
        report = results / "verify" / model / scheme / profile / "verify.json"
        if job is not None and report.exists():  # what the job ran on: a model with data has more samples
            record = json.loads(report.read_text())
            if SAME_AS_REPORT in record:  # the u55 profile's (ethosweep.verify.numerics)
                record = json.loads((run / record[SAME_AS_REPORT]).read_text())
            row["samples"] = record.get("samples", samples)
        if verifies_what_u55_did(results, model, scheme, profile):
            row["projected s"] = 0.0  # the u55 profile's verification, taken
        else:
            try:  # in a fork: the reference model is native code, and a model's memory goes with it
                row.update(call_in_child(one_sample, files_of(results, model, scheme, profile), what="one sample"))
                row["projected s"] = projected(row, row["samples"])
            except StageError as error:  # as the verify job would fail: said, and not projected
                row["projected s"], row["error"] = 0.0, str(error).splitlines()[0][:160]
        row["job CPU s"] = job
        print(table([row], header=False), flush=True)
        found.append(row)
    return found


def table(found: list[dict], header: bool = True) -> str:
    def cell(value) -> str:
        return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["\t".join(HEADER)] if header else []
    return "\n".join(lines + ["\t".join(cell(row.get(key)) for key in HEADER) for row in found])


def table_rows(run: Path, found: list[dict]) -> list[dict]:
    """A verify_numerics row per profile, as perf/measured_costs.py keys its rows."""
    models = model_definitions(run)
    return [
        {
            "rule": "verify_numerics",
            "model": row["model"],
            "fingerprint": job_key(models[row["model"]], {})[0],
            "wildcards": f"{row['scheme']}/{row['profile']}",
            "cpu_seconds": f"{row['job CPU s'] - JOB_OVERHEAD_SECONDS if row['job CPU s'] else row['projected s']:.2f}",
        }
        for row in found
        if row["model"] in models and (row["job CPU s"] or "error" not in row)
    ]


def write_table(path: Path, rows: list[dict]) -> None:
    table = write_merged(path, rows)
    print(f"{len(rows)} verify rows into {path} ({len(table):,} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (results/ and logs/ of a sweep)")
    parser.add_argument("--samples", type=int, default=40, help="samples a verify job runs (numerics.random_samples)")
    parser.add_argument("--only", nargs="*", default=[], help="these models only")
    parser.add_argument("--out", type=Path, nargs="?", const=MEASURED_COSTS, help="merge the rows into this table")
    args = parser.parse_args()
    print("\t".join(HEADER), flush=True)
    found = rows(args.run, args.samples, args.only)
    total = sum(row["projected s"] for row in found)
    print(f"{len(found)} profiles: verification projected at {total:,.0f} CPU-s")
    if args.out:
        write_table(args.out, table_rows(args.run, found))


if __name__ == "__main__":
    main()
