"""Sweep throughput: ethosweep against the seeds' one-cell-at-a-time way, same machine, same run.

    uv run python perf/sweep.py                 # 28 cells: BENCH_MODELS x targets x FIRST_MODES, + boards
    uv run python perf/sweep.py --matrix default --cores 2
    uv run python perf/sweep.py --smoke         # mnist on ethos-u55-128 and -u85-256, no boards: minutes

Times, in this order:
  peer sequential   `python -m executorch.backends.arm.scripts.aot_arm_compiler --delegate --quantize ...`
                    once per cell, one after another (the seeds' way);
  peer parallel     the same commands, --cores at a time (not in --smoke: the same commands
                    again, and the tests' CPU is their scarcest resource);
  ethosweep cold    `snakemake --cores N` from empty results;
  ethosweep no-op   the same command again (nothing to do);
  incremental       after adding one memory mode, after editing one model file, after
                    changing one Vela option (each against the state the previous left);
  new cells alone   the added memory mode's cells as a sweep of their own, from empty results.
Then prints each time, the ratios, peak memory (PSS summed over all processes involved, the
warm worker included), and checks that both sides compiled the same thing (the speed must not
come from doing less), per cell:
  - the two programs are equal apart from the intermediates path aot_arm_compiler records;
  - every delegate's Vela command stream and weights are byte-identical (a .pte without any
    Vela payload fails the check: there would be nothing to compare);
  - Vela's cycle count agrees for the cell's last partition, the only one whose report
    aot_arm_compiler keeps (its intermediates folder has fixed file names).

Vela's cycle counts are compiler estimates; here they only serve as a fingerprint of the work.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ethosweep.matrix.expand import build_sweep  # noqa: E402
from peer import compare_work, peer_cells, run_peer, same_work_line, write_peer_models  # noqa: E402
from workdirs import make_workdir, snakemake, warm_page_cache, write_config  # noqa: E402

# 4 models x 3 targets x 2 memory modes = 24 cells, + 4 cells of the i.MX93 board's (Ethos-U65,
# Dedicated_Sram_384KB) = 28: the default matrix without its two trivial models (add, softmax) and the
# slow MobileNetV2 and MobileNetV1 (--matrix default has them).
BENCH_MODELS = ("mnist", "ds_cnn", "resnet8", "deep_autoencoder")
FIRST_MODES = ["Shared_Sram", "Sram_Only"]  # the incremental step adds Dedicated_Sram


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", choices=["bench", "default", "smoke"], default="bench")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the same checks on 2 cells (--matrix smoke), the seeds' way one at a time only",
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp dir)")
    parser.add_argument("--skip-peer", action="store_true", help="only time ethosweep")
    args = parser.parse_args(argv)

    root = args.workdir or Path(tempfile.mkdtemp(prefix="ethosweep-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    config = bench_config("smoke" if args.smoke else args.matrix)
    sweep = build_sweep(config, REPO)
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {_mem_gib():.0f} GiB; python {platform.python_version()}"
    )
    print(f"matrix: {sweep.describe().removeprefix('ethosweep: ')}; --cores {args.cores}; workdir {root}\n")

    times, peaks = {}, {}

    def timed(name, func):
        with PeakRss() as peak:
            started = time.perf_counter()
            func()
            times[name] = time.perf_counter() - started
        peaks[name] = peak.max_mib
        print(f"  {name:<34} {times[name]:8.1f} s   peak {peaks[name]:6.0f} MiB PSS", flush=True)

    peer_dir = root / "peer"
    parallel = f"peer parallel ({args.cores} at a time)"
    peer_failed = {}
    warm_page_cache()
    if not args.skip_peer:
        compared, left_out = peer_cells(sweep)
        print("\n".join(f"  not compared: {why}" for why in left_out))
        write_peer_models(peer_dir, sweep, compared)
        timed("peer sequential", lambda: peer_failed.update(run_peer(peer_dir / "seq", compared, workers=1)))
        if not args.smoke:
            timed(parallel, lambda: peer_failed.update(run_peer(peer_dir / "par", compared, workers=args.cores)))

    work = make_workdir(root / "ethosweep", config)
    timed("ethosweep cold", lambda: snakemake(work, args.cores, cold=True))
    if not args.skip_peer:
        # before the incremental steps change cells
        same_work = compare_work(work, peer_dir / "seq", compared, peer_failed)
    timed("ethosweep no-op", lambda: snakemake(work, args.cores))
    timed("ethosweep no-op, via `uv run`", lambda: snakemake(work, args.cores, via_uv=True))

    added = dict(config, memory_modes=[*config["memory_modes"], "Dedicated_Sram"])
    write_config(work, added)
    timed("incremental: +1 memory mode", lambda: snakemake(work, args.cores))
    new_cells = [c for c in build_sweep(added, REPO).cells if c.memory_mode == "Dedicated_Sram"]

    with open(work / "models" / "mnist.py", "a") as f:
        f.write("\n# benchmark edit\n")
    timed("incremental: edit 1 model file", lambda: snakemake(work, args.cores))

    vela_changed = dict(
        added,
        targets=[t if t != "ethos-u85-256" else {"target": t, "vela": {"optimise": "Size"}} for t in added["targets"]],
    )
    write_config(work, vela_changed)
    timed("incremental: 1 Vela option (U85)", lambda: snakemake(work, args.cores))

    alone = make_workdir(root / "alone", dict(config, memory_modes=["Dedicated_Sram"]))
    timed(f"new cells alone ({len(new_cells)} cells, cold)", lambda: snakemake(alone, args.cores, cold=True))

    print()
    if not args.skip_peer:
        cold = times["ethosweep cold"]
        print(f"cold / peer sequential            {cold / times['peer sequential']:6.2f}   (target <= 0.15)")
        if parallel in times:
            print(f"cold / peer parallel              {cold / times[parallel]:6.2f}   (target <= 0.30)")
    print(
        f"no-op                             {times['ethosweep no-op']:6.1f} s (target <= 3 s); "
        f"{times['ethosweep no-op, via `uv run`']:.1f} s with `uv run`"
    )
    ratio = times["incremental: +1 memory mode"] / times[f"new cells alone ({len(new_cells)} cells, cold)"]
    print(f"+1 memory mode / new cells alone  {ratio:6.2f}   (target <= 1.2)")
    # one job per cell: its Vela run, its .pte and its C header (docs/how-it-works.md)
    job_seconds = sum(job_time(work, "vela", cell) for cell in new_cells)
    print(
        f"+1 memory mode: wall {times['incremental: +1 memory mode']:.1f} s for {job_seconds:.1f} s of the new cells' "
        f"own job time on {args.cores} cores"
    )

    if not args.skip_peer:
        if same_work:
            print("DIFFERENT WORK:\n  " + "\n  ".join(same_work))
            return 1
        print(same_work_line(compared))
    return 0


# ---- the two sides ---------------------------------------------------------------


def bench_config(matrix: str) -> dict:
    # The peer (aot_arm_compiler per cell) compiles Ethos-U cells only: so does ethosweep here.
    default = dict(yaml.safe_load((REPO / "config" / "config.yaml").read_text()), cpu_targets=[])
    if matrix == "default":
        return dict(default, memory_modes=FIRST_MODES)
    if matrix == "smoke":
        # Every step still has cells to do (U85 for +Dedicated_Sram and its Vela option), in one memory
        # mode: the seeds' way costs a process per cell (~20 s here, half of it importing torch and
        # ExecuTorch), and the tests run this.
        models = [m for m in default["models"] if m["name"] == "mnist"]
        return dict(
            default, models=models, targets=["ethos-u55-128", "ethos-u85-256"], boards=[], memory_modes=["Shared_Sram"]
        )
    models = [m for m in default["models"] if m["name"] in BENCH_MODELS]
    return dict(default, models=models, memory_modes=FIRST_MODES)


def job_time(workdir: Path, stage: str, cell) -> float:
    with open(workdir / "benchmarks" / stage / f"{cell.id}.tsv") as f:
        return float(list(csv.DictReader(f, delimiter="\t"))[-1]["s"])


class PeakRss:
    """Samples the memory of this process's descendants and of the warm workers they use.

    Summed as PSS (proportional set size): a forked worker child shares most of its
    pages with the worker, and RSS would count those pages once per process.
    """

    def __enter__(self):
        self.max_mib, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        from ethosweep.runtime.worker import fingerprint

        # the warm workers of this checkout and environment (the user's and a cold run's own), not
        # those of other checkouts or environments that may be running on the machine
        ours = f"worker-{fingerprint()}.sock"
        me = os.getpid()
        while not self._stop.wait(0.2):
            procs = _processes()
            family = {me}
            changed = True
            while changed:
                changed = False
                for pid, (ppid, cmd) in procs.items():
                    if pid not in family and (ppid in family or ("ethosweep.runtime.worker" in cmd and ours in cmd)):
                        family.add(pid)
                        changed = True
            total = sum(_pss_kib(p) for p in family if p != me)
            self.max_mib = max(self.max_mib, total / 1024)


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line), for every process (cheap to read, unlike their memory)."""
    result = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        result[int(entry)] = (int(stat.rpartition(")")[2].split()[1]), cmd)
    return result


def _pss_kib(pid: int) -> int:
    """A process's PSS. Read only for the processes measured: the kernel walks a process's page
    tables to sum it, ~40 ms a sample for every process on the machine, a core's fifth at 5 Hz."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)


def _mem_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


if __name__ == "__main__":
    sys.exit(main())
