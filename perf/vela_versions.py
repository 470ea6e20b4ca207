"""Adding a Vela version to a finished sweep: what it costs, against Vela alone and the seeds' way.

    uv run python perf/vela_versions.py            # the default matrix (81 cells), ~15 minutes on 2 cores
    uv run python perf/vela_versions.py --smoke    # 2 models on one target (a test runs this)

1. The matrix, cold, with the Vela installed beside ExecuTorch (not the measurement: the state a
   user is in when a new Vela comes out).
2. `vela: {versions: [<installed>, 5.2.0]}` added. A dry run must plan one Vela job per cell, the
   version's environment, and what reads the Vela jobs: no export, quantization, lowering or
   verification. Then the run, timed: the marginal cost of one more Vela version.
3. Against it, on the same machine in the same run:
   - Vela alone: that version's `vela` command on every partition of every cell, with the cells'
     flags, --cores at a time: the least any tool could do;
   - the seeds' way: `aot_arm_compiler --delegate --quantize` per cell in the project's environment
     with that Vela layered over it (`uv run --with ethos-u-vela==5.2.0`), one cell after another:
     what trying a new Vela costs without ethosweep. Timed on one cell per model (--peer all: every
     cell) and counted for every cell of that model.
4. Checks that the speed does not come from doing less: the installed version's cells are
   untouched (same bytes, same mtimes); every new cell's Vela cycles per partition equal Vela
   alone's; and each timed peer cell's Vela command streams and weights are byte-identical to the
   sweep's cell of that version.

Vela's cycle counts are compiler estimates; here they only serve as a fingerprint of the work.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ethosweep.compile.compile_spec import vela_flags  # noqa: E402
from ethosweep.matrix.expand import build_sweep  # noqa: E402
from peer import PEER_ENV, peer_cells, peer_command, vela_blobs, write_peer_models  # noqa: E402
from workdirs import make_workdir, run_all, snakemake, timed, warm_page_cache, write_config  # noqa: E402
from workdirs import planned as planned_jobs  # noqa: E402

OTHER = "5.2.0"
SMOKE_MODELS = ("mnist", "ds_cnn")  # ds_cnn: two partitions on Ethos-U55
EARLIER_STAGES = ("train_model", "export_model", "quantize_model", "lower_to_tosa", "verify_numerics", "lower_cpu")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="2 models on ethos-u55-128 / Shared_Sram: minutes")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--peer", choices=["sample", "all", "none"], default="sample")
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    args = parser.parse_args(argv)
    warm_page_cache()  # the side timed first must not read torch from disk for the other
    root = args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-vela-versions-"))
    root.mkdir(parents=True, exist_ok=True)
    installed = importlib.metadata.version("ethos-u-vela")
    config = base_config(args.smoke)
    sweep = build_sweep(config, REPO)
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; python {platform.python_version()}; "
        f"--cores {args.cores}; workdir {root}",
        flush=True,
    )
    print(f"matrix: {sweep.describe().removeprefix('ethosweep: ')}; Vela {installed} installed, adding {OTHER}\n")
    work = make_workdir(root / "ethosweep", config)
    timed(f"the matrix, cold, Vela {installed}", lambda: snakemake(work, args.cores, cold=True))
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (work / "results/vela").rglob("model.pte")}

    two = dict(config, vela=dict(config.get("vela") or {}, versions=[installed, OTHER]))
    write_config(work, two)
    swept = build_sweep(two, REPO)
    new_cells = [c for c in swept.cells if c.vela_version == OTHER]
    planned = planned_jobs(work, args.cores)
    print(f"  planned: {', '.join(f'{k} {v}' for k, v in planned.items())}", flush=True)
    problems = [f"planned {planned.get(s)} {s} jobs" for s in EARLIER_STAGES if planned.get(s)]
    if planned.get("compile_with_vela") != len(new_cells):
        problems.append(f"planned {planned.get('compile_with_vela')} Vela jobs for {len(new_cells)} new cells")
    added_s = timed(f"+ Vela {OTHER}: {len(new_cells)} new cells", lambda: snakemake(work, args.cores))
    vela = work / f"results/tools/vela/{OTHER}/venv/bin/vela"
    commands = vela_commands(vela, work, new_cells, root / "vela-alone")
    alone_s = timed(
        f"Vela {OTHER} alone on their {len(commands)} partitions, {args.cores} at a time",
        lambda: run_all(commands, args.cores),
    )
    peer = {}
    # the cells the seeds' way can compile as the sweep did (peer.peer_cells: not a model trained or
    # calibrated on a dataset ethosweep loads, such as mnist_digits), of the added version
    comparable = [c for c in peer_cells(swept)[0] if c.vela_version == OTHER]
    if args.smoke:  # one process of the seeds' way (~20 s here, half of it importing torch): the tests run this
        comparable = comparable[:1]
    if args.peer != "none" and comparable:
        peer = run_peer(root / "peer", work, swept, comparable, args.peer == "all")

    n = len(new_cells)
    print()
    print(f"one more Vela version, per cell    {added_s / n:6.2f} s wall (its Vela job, and its share of the rest)")
    print(f"Vela alone, per cell               {alone_s / n:6.2f} s wall")
    print(f"cell / Vela alone                  {added_s / alone_s:6.2f}   (target <= 1.5: about one Vela run a cell)")
    if peer:
        per_peer_cell = sum(peer["seconds"][c.model] for c in comparable) / len(comparable)
        print(
            f"the seeds' way, per cell           {per_peer_cell:6.2f} s ({peer['measured']} cells timed, each model's "
            f"time counted for each of its {len(comparable)} cells)"
        )
        print(f"ethosweep / the seeds' way         {added_s / n / per_peer_cell:6.3f}   (per cell)")

    problems += untouched(before)
    problems += same_cycles(work, new_cells, root / "vela-alone")
    problems += peer.get("problems", [])
    if problems:
        print("DIFFERENT WORK:\n  " + "\n  ".join(problems))
        return 1
    print(
        f"same work: the {len(before)} cells of Vela {installed} untouched (bytes and mtimes); all {n} cells of Vela "
        f"{OTHER} have the cycles of Vela {OTHER} alone on every partition"
        + (
            f"; the {peer['measured']} cells compiled the seeds' way have byte-identical Vela command streams and "
            "weights"
            if peer
            else ""
        )
    )
    return 0


def base_config(smoke: bool) -> dict:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if not smoke:
        return default
    return dict(
        default,
        models=[m for m in default["models"] if m["name"] in SMOKE_MODELS],
        targets=["ethos-u55-128"],
        memory_modes=["Shared_Sram"],
        boards=[],
        cpu_targets=[],
    )


def partitions(work: Path, cell) -> list[Path]:
    lowered = work / "results/lower" / cell.model / cell.quant / cell.tosa_profile
    return [lowered / "tosa" / p["tosa"] for p in json.loads((lowered / "lower.json").read_text())["partitions"]]


def vela_commands(vela: Path, work: Path, cells, out: Path) -> list[list[str]]:
    """The `vela` command line for each partition of each cell, with the cell's flags (worked out
    before the clock starts: the flags come from ExecuTorch's compile spec, and importing
    ExecuTorch takes seconds that Vela alone does not spend)."""
    commands = []
    for cell in cells:
        flags = vela_flags(cell)
        for index, tosa in enumerate(partitions(work, cell)):
            target = out / cell.id / str(index)
            commands.append([str(vela), str(tosa), *flags, f"--output-dir={target}", "--verbose-performance"])
    return commands


def untouched(before: dict) -> list[str]:
    return [
        f"{path}: rewritten"
        for path, (data, mtime) in before.items()
        if not path.is_file() or path.read_bytes() != data or path.stat().st_mtime_ns != mtime
    ]


def same_cycles(work: Path, cells, alone: Path) -> list[str]:
    problems = []
    for cell in cells:
        summary = json.loads((work / "results/vela" / cell.id / "summary.json").read_text())
        for row in summary["partitions"]:
            (report,) = (alone / cell.id / str(row["partition"])).glob("*_summary_*.csv")
            with open(report, newline="") as f:
                cycles = int(float(next(csv.DictReader(f))["cycles_total"]))
            if cycles != row["cycles_total"]:
                problems.append(f"{cell.id} partition {row['partition']}: {row['cycles_total']} vs alone {cycles}")
    return problems


def run_peer(peer_dir: Path, work: Path, sweep, cells, every_cell: bool) -> dict:
    """aot_arm_compiler per cell with the other Vela layered over the project's environment."""
    write_peer_models(peer_dir, sweep, cells)
    # the project's environment with the other Vela layered over it, as a user would try it
    python = ["uv", "run", "--project", str(REPO), "--with", f"ethos-u-vela=={OTHER}", "python"]
    problems = [] if peer_vela_is(python, OTHER) else [f"the peer's environment does not have Vela {OTHER}"]
    timed_cells = cells if every_cell else list({c.model: c for c in reversed(cells)}.values())[::-1]
    seconds: dict[str, list[float]] = {}
    for cell in timed_cells:
        out = peer_dir / "cells" / cell.id
        out.mkdir(parents=True, exist_ok=True)
        command = [*python, *peer_command(peer_dir / "cells", out, cell)[1:]]
        started = time.perf_counter()
        with open(out / "log.txt", "w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=log, cwd=out, env=PEER_ENV)
        seconds.setdefault(cell.model, []).append(time.perf_counter() - started)
        ours = vela_blobs(work / "results/vela" / cell.id / "model.pte")
        if not ours or ours != vela_blobs(out / "model.pte"):
            problems.append(f"{cell.id}: the peer's Vela payloads differ from the sweep's")
    per_model = {model: sum(times) / len(times) for model, times in seconds.items()}
    print(
        f"  {'the seeds way: aot_arm_compiler per cell, Vela ' + OTHER:<62} "
        f"{sum(sum(t) for t in seconds.values()):8.1f} s ({len(timed_cells)} cells)",
        flush=True,
    )
    return {"seconds": per_model, "measured": len(timed_cells), "problems": problems}


def peer_vela_is(python: list[str], version: str) -> bool:
    code = "import importlib.metadata as m; print(m.version('ethos-u-vela'))"
    return subprocess.run([*python, "-c", code], capture_output=True, text=True).stdout.strip().endswith(version)


if __name__ == "__main__":
    sys.exit(main())
