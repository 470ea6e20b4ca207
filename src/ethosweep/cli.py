"""The `ethosweep` command.

`ethosweep compare A/summary.csv B/summary.csv` compares two runs cell by cell: what changed in
cycles, time, memory, size and accuracy, and which tool versions differ; the tool for "did
upgrading Vela/ExecuTorch change anything?".

`ethosweep check-sdk [config.yaml]` says which parts the firmware and FVP stages find (the
config's `sdk` section, PATH), and how to get the others.
"""

from __future__ import annotations

import argparse
import sys

from ethosweep.results.table import number, read_summary_csv
from ethosweep.runtime.provenance import TOOLS

KEY = ("model", "quantization", "target", "system_config", "memory_mode", "board")
COMPARED = (
    ("vela_cycles_total", "Vela cycles"),
    ("vela_inference_ms", "ms"),
    ("vela_sram_kib", "SRAM KiB"),
    ("pte_bytes", ".pte bytes"),
    ("top1_npu", "top-1 NPU"),
    ("max_error_steps", "error steps"),
)


def compare(a_rows: list[dict], b_rows: list[dict]) -> dict:
    """Per-cell deltas between two summaries (B relative to A)."""
    a = {tuple(r.get(k, "") for k in KEY): r for r in a_rows}
    b = {tuple(r.get(k, "") for k in KEY): r for r in b_rows}
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
        tool: (a_rows[0].get(tool), b_rows[0].get(tool))
        for tool in [*TOOLS, "ethosweep"]
        if a_rows and b_rows and a_rows[0].get(tool) != b_rows[0].get(tool)
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
        cell = " / ".join(k for k in key if k)
        parts = []
        for label, (x, y) in deltas.items():
            if isinstance(x, float) and isinstance(y, float) and x:
                parts.append(f"{label} {x:g} -> {y:g} ({100 * (y - x) / x:+.1f} %)")
            else:
                parts.append(f"{label} {x} -> {y}")
        lines.append(f"  {cell}: " + "; ".join(parts))
    for name, keys in (("only in A", result["only_a"]), ("only in B", result["only_b"])):
        for key in keys:
            lines.append(f"  {name}: " + " / ".join(k for k in key if k))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ethosweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cmp_parser = commands.add_parser("compare", help="per-cell deltas between two results/summary.csv files")
    cmp_parser.add_argument("a", help="the reference summary.csv")
    cmp_parser.add_argument("b", help="the summary.csv to compare with it")
    sdk_parser = commands.add_parser("check-sdk", help="what the firmware and FVP stages find, and how to get the rest")
    sdk_parser.add_argument("config", nargs="?", default="config/config.yaml", help="the workflow's config")
    args = parser.parse_args(argv)
    if args.command == "check-sdk":
        return check_sdk(args.config)
    result = compare(read_summary_csv(args.a), read_summary_csv(args.b))
    print(format_comparison(result, args.a, args.b))
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
