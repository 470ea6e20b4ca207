"""The `ethosweep` command.

`ethosweep compare A/summary.csv B/summary.csv` compares two runs cell by cell: what changed in
cycles, time, memory, size and accuracy, and which tool versions differ; the tool for "did
upgrading Vela/ExecuTorch change anything?". When the two runs were compiled by different Vela
versions, and for one run that sweeps several (`ethosweep compare results/summary.csv`), it also
shows per model and target what each Vela version changes, largest first, regressions named,
and the layer whose cycles moved most.

`ethosweep check-sdk [config.yaml]` says which parts the firmware and FVP stages find (the
config's `sdk` section, PATH), and how to get the others.

`ethosweep picks [results/summary.csv] [--board B] [--task T] [--budget-ms X] [--json]` prints what
the report's first screen picks: per board and task, each model's fastest configuration that fits
(and whether it meets the latency budget); for the cells on no board, the fastest configuration.

`ethosweep failed [results/summary.csv]` prints the output of each job whose failure a cell
records, one per line: `uv run snakemake --cores 8 --forcerun $(uv run ethosweep failed)` retries
them (a recorded failure is otherwise kept until something it depends on changes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ethosweep.matrix.cell import Cell, cell_id
from ethosweep.results import vela_versions as vv
from ethosweep.results.table import number, read_summary_csv
from ethosweep.runtime.provenance import TOOLS

COMPARED = (
    ("vela_cycles_total", "Vela cycles"),
    ("vela_inference_ms", "ms"),
    ("vela_sram_kib", "SRAM KiB"),
    ("pte_bytes", ".pte bytes"),
    ("top1_npu", "top-1 NPU"),
    ("max_error_steps", "error steps"),
)


def _key(row: dict) -> tuple[Cell, str]:
    """A row's cell and board: the same cell in two runs (a cell of another Vela version is compared
    with the same version's)."""
    return (Cell.of(row), row.get("board", ""))


def _version(row: dict, tool: str) -> str:
    """A tool's version in a row (summaries before ethosweep named the columns without `_version`)."""
    return row.get(f"{tool}_version", row.get(tool, ""))


def _shown(key: tuple[Cell, str]) -> str:
    """'mnist / int8 / ethos-u85-256 / Ethos_U85_SYS_DRAM_Mid / Shared_Sram / alif-e8'"""
    cell, board = key
    return " / ".join([*cell.parts, *([board] if board else [])])


def compare(a_rows: list[dict], b_rows: list[dict]) -> dict:
    """Per-cell deltas between two summaries (B relative to A)."""
    a = {_key(r): r for r in a_rows}
    b = {_key(r): r for r in b_rows}
    changed = []
    for key in [k for k in a if k in b]:
        deltas = {}
        for column, label in COMPARED:
            x, y = number(a[key].get(column), None), number(b[key].get(column), None)
            if x != y and not (x is None and y is None):
                deltas[label] = (x, y)
        if a[key].get("status") != b[key].get("status"):
            deltas["status"] = (a[key].get("status"), b[key].get("status"))
        if deltas:
            changed.append((key, deltas))
    versions = {
        tool: (_version(a_rows[0], tool), _version(b_rows[0], tool))
        for tool in [*TOOLS, "ethosweep"]
        if a_rows and b_rows and _version(a_rows[0], tool) != _version(b_rows[0], tool)
    }
    return {
        "changed": changed,
        "only_a": [k for k in a if k not in b],
        "only_b": [k for k in b if k not in a],
        "same": sum(1 for k in a if k in b) - len(changed),
        "versions": versions,
    }


def format_comparison(result: dict, a_name: str, b_name: str) -> str:
    lines = [f"comparing {b_name} against {a_name}"]
    for tool, (x, y) in result["versions"].items():
        lines.append(f"  version: {tool} {x} -> {y}")
    lines.append(
        f"  {result['same']} cells unchanged, {len(result['changed'])} changed, "
        f"{len(result['only_a'])} only in A, {len(result['only_b'])} only in B"
    )
    for key, deltas in result["changed"]:
        cell = _shown(key)
        parts = []
        for label, (x, y) in deltas.items():
            if isinstance(x, float) and isinstance(y, float) and x:
                parts.append(f"{label} {x:g} -> {y:g} ({100 * (y - x) / x:+.1f} %)")
            else:
                parts.append(f"{label} {x} -> {y}")
        lines.append(f"  {cell}: " + "; ".join(parts))
    for name, keys in (("only in A", result["only_a"]), ("only in B", result["only_b"])):
        for key in keys:
            lines.append(f"  {name}: " + _shown(key))
    return "\n".join(lines)


def per_layer_files(rows: list[dict], summary: str) -> dict[str, str]:
    """Each cell's per-layer CSV (beside its .pte, relative to the run the summary belongs to)."""
    run = Path(summary).resolve().parent.parent  # <run>/results/summary.csv
    found = {}
    for row in rows:
        if row.get("pte"):
            path = run / Path(row["pte"]).parent / "per_layer.csv"
            if path.exists():
                found[cell_id(row)] = str(path)
    return found


def across_runs(a_rows: list[dict], b_rows: list[dict], a_name: str, b_name: str) -> list[vv.TargetChange]:
    """Two runs compiled by different Vela versions, as one table of versions: B's cells tagged
    with their version and paired with A's."""
    a_layers, b_layers = per_layer_files(a_rows, a_name), per_layer_files(b_rows, b_name)
    tagged_b = [{**r, "cell": f"{cell_id(r)}#B"} for r in b_rows]
    layers = {**a_layers, **{f"{k}#B": v for k, v in b_layers.items()}}
    base = _version(a_rows[0], "vela") if a_rows else None
    return vv.compare_versions([*a_rows, *tagged_b], base_version=base, per_layer=layers)


def compare_vela_versions(summary: str) -> list[str]:
    rows = read_summary_csv(summary)
    changes = vv.compare_versions(rows, per_layer=per_layer_files(rows, summary))
    if not changes:
        return [f"{summary}: one Vela version ({', '.join(vv.versions_in(rows)) or 'none'}): nothing to compare"]
    return [f"Vela versions in {summary}: {', '.join(vv.versions_in(rows))}", *vv.format_changes(changes)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ethosweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cmp_parser = commands.add_parser(
        "compare",
        help="per-cell deltas between two results/summary.csv files, or the Vela versions one sweep compiled with",
    )
    cmp_parser.add_argument("a", help="the reference summary.csv (alone: compare the Vela versions it holds)")
    cmp_parser.add_argument("b", nargs="?", help="the summary.csv to compare with it")
    sdk_parser = commands.add_parser("check-sdk", help="what the firmware and FVP stages find, and how to get the rest")
    sdk_parser.add_argument("config", nargs="?", default="config/config.yaml", help="the workflow's config")
    failed_parser = commands.add_parser("failed", help="the outputs of the failed jobs the cells record, to --forcerun")
    failed_parser.add_argument(
        "summary", nargs="*", help="the run's summaries (default: results/summary.csv and results/cpu/summary.csv)"
    )
    picks_parser = commands.add_parser("picks", help="what to pick, per board and task, from a run's summary")
    picks_parser.add_argument("summary", nargs="?", default="results/summary.csv", help="the run's summary.csv")
    picks_parser.add_argument(
        "--board", action="append", default=[], help="only this board (repeatable; 'bare' for cells on no board)"
    )
    picks_parser.add_argument("--task", action="append", default=[], help="only the models of this task (repeatable)")
    picks_parser.add_argument("--budget-ms", type=float, default=None, help="the latency budget to check, in ms")
    picks_parser.add_argument("--json", action="store_true", help="the picks as JSON, for scripts")
    cache_parser = commands.add_parser(
        "cache", help="what the store of stage results shared between results folders holds (ETHOSWEEP_CACHE)"
    )
    cache_parser.add_argument("action", nargs="?", choices=("show", "prune"), default="show")
    cache_parser.add_argument(
        "--max-gb", type=float, default=None, help="prune to this size (default: ETHOSWEEP_CACHE_MAX_GB, or 20)"
    )
    args = parser.parse_args(argv)
    if args.command == "cache":
        return cache_command(args.action, args.max_gb)
    if args.command == "picks":
        return picks_command(args.summary, args.board, args.task, args.budget_ms, args.json)
    if args.command == "check-sdk":
        return check_sdk(args.config)
    if args.command == "failed":
        summaries = args.summary or [p for p in DEFAULT_SUMMARIES if os.path.exists(p)]
        print("\n".join(failed_outputs([row for path in summaries for row in read_summary_csv(path)])))
        return 0
    if args.b is None:
        print("\n".join(compare_vela_versions(args.a)))
        return 0
    a_rows, b_rows = read_summary_csv(args.a), read_summary_csv(args.b)
    result = compare(a_rows, b_rows)
    print(format_comparison(result, args.a, args.b))
    if "vela" in result["versions"]:
        print(
            "\n".join(
                [
                    "",
                    "Vela versions, per model and target:",
                    *vv.format_changes(across_runs(a_rows, b_rows, args.a, args.b)),
                ]
            )
        )
    return 0


DEFAULT_SUMMARIES = ("results/summary.csv", "results/cpu/summary.csv")


def picks_command(summary: str, boards: list[str], tasks: list[str], budget_ms: float | None, as_json: bool) -> int:
    from ethosweep.results import picks

    if not os.path.exists(summary):
        print(f"ethosweep picks: no {summary}: run the sweep first (uv run snakemake --cores 8)", file=sys.stderr)
        return 2
    rows = read_summary_csv(summary)
    known = {r["task"] for r in rows if r.get("task")}
    if set(tasks) - known:
        print(
            f"ethosweep picks: no task {sorted(set(tasks) - known)} in {summary} (it has {sorted(known)})",
            file=sys.stderr,
        )
        return 2
    sections = picks.sections_for(rows, summary_boards(rows), budget_ms, tuple(tasks))
    if boards:
        sections = [s for s in sections if (s.board or "bare") in boards]
    if as_json:
        import json

        print(json.dumps([s.as_dict() for s in sections], indent=1))
    else:
        print(picks.picks_text(sections))
    return 0


def summary_boards(rows: list[dict]) -> dict[str, dict]:
    """The profiles of the boards a summary places cells on: the repository's boards/ files, or for
    a board defined in the run's own config, what its rows say (its target)."""
    from ethosweep.matrix.boards import board_from_profile, builtin_board_files, load_board_file

    files = builtin_board_files()
    boards = {}
    for row in rows:
        name = row.get("board")
        if name and name not in boards:
            if name in files:
                boards[name] = board_from_profile(load_board_file(files[name]), str(files[name])).as_params()
            else:
                boards[name] = {"name": name, "target": row["target"], "npu_clock_mhz": "?"}
    return boards


def failed_outputs(rows: list[dict]) -> list[str]:
    """The output of each failed job the summaries' rows record, once each, in order: the job that
    stopped a cell (failed_output) and the later ones whose failure a compiled cell carries
    (recorded_failures: verification, the runner, the FVP or QEMU run)."""
    outputs = []
    for row in rows:
        outputs.append(row.get("failed_output") or "")
        outputs.extend((row.get("recorded_failures") or "").split("; "))
    return list(dict.fromkeys(o for o in outputs if o))


def cache_command(action: str, max_gb: float | None) -> int:
    """`ethosweep cache [show|prune]`: the store's entries and size, or pruned to its limit."""
    from ethosweep.runtime import cache

    root = cache.store()
    if root is None:
        print(f"no cache: set {cache.ENV} to a folder to share stage results between results folders (docs/cache.md)")
        return 1
    if action == "prune" and root.is_dir():
        removed = cache.prune(root, None if max_gb is None else int(max_gb * 2**30))
        print(f"removed {cache.entries_said(len(removed))} (least recently used first)")
    print(cache.describe_store(root) if root.is_dir() else f"{root}: nothing stored yet")
    return 0


def check_sdk(config_path: str) -> int:
    """Print the SDK table; exit 1 when firmware cannot be built."""
    from pathlib import Path

    import yaml

    from ethosweep.firmware.sdk import format_status, probe

    config = yaml.safe_load(Path(config_path).read_text()) or {}
    status = probe(config.get("sdk"))
    print(format_status(status))
    return 0 if status.firmware_ready() else 1


if __name__ == "__main__":
    sys.exit(main())
