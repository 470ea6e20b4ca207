"""The operator map: which operators of the zoo run where, per NPU family and scheme, and why not.

From each (model, scheme, TOSA profile)'s delegation table (the lower stage's delegation.json:
ExecuTorch's get_delegation_info with the partitioner's reasons) and each model's Vela figures:

- `results/operators.csv`, one row per operator (as the partitioner saw it, e.g. avg_pool2d) x
  NPU family (Ethos-U55/U65 share a TOSA profile, Ethos-U85 has its own) x scheme: on the NPU,
  on the CPU, or both (on the NPU for some models, left on the CPU for others), the partitioner's
  reason in its words, which models it holds back, and, where the reason is a known limit with a
  known way round, that way in one line. Sorted so that what holds most models back comes first.
  A cell the partitioner delegated and Vela then refused (its failure record) holds its model
  back too: a row per operator Vela names x family x scheme, "rejected by Vela", in Vela's words.
- `results/operator_models.csv`, one row per model x family x scheme: its operators on the NPU,
  the share of its multiply-accumulates that run there (Vela's MACs against the MACs left on the
  CPU, counted from the tensors' shapes), and how often its program passes between NPU and CPU.
- an operator a cell's program leaves on the CPU that none of the runner's kernel libraries
  implements (ethosweep.firmware.kernels) gets a row of its own, "on the CPU, no kernel": the
  program would fail at load on the board.

Torch-free.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from dataclasses import dataclass

from ethosweep.firmware.kernels import WAY_ROUND
from ethosweep.matrix.targets import tosa_profile
from ethosweep.runtime.io import atomic_write_text, read_json
from ethosweep.runtime.outcome import describe, failure_of

FAMILIES = {"u55": "Ethos-U55/U65", "u85": "Ethos-U85"}
# Operators that do no compute: the int8 <-> float boundary, tuple unpacking, layout copies.
BOOKKEEPING = re.compile(r"quantize_per_|dequantize_per_|^getitem$|clone_dim_order|_to_dim_order_copy")

OPERATOR_COLUMNS = (
    "operator",
    "family",
    "scheme",
    "where",
    "models_held_back",
    "models_on_npu",
    "held_back",
    "reason",
    "way_round",
)
MODEL_COLUMNS = (
    "model",
    "family",
    "scheme",
    "delegated",
    "npu_ops",
    "cpu_compute_ops",
    "npu_mac_share_pct",
    "npu_macs",
    "cpu_macs",
    "partitions",
    "npu_cpu_switches",
)


@dataclass(frozen=True)
class KnownLimit:
    """A partitioner reason that is a documented limit of the NPU, and what to do about it."""

    pattern: str
    families: tuple[str, ...]
    way_round: str
    # the schemes the way round applies to: never tell an int8 cell to quantize as int8
    schemes: tuple[str, ...] = ("int8", "a16w8")


# Only reasons whose limit and way round are documented (Vela's supported-operator constraints,
# ExecuTorch's Arm backend's partitioner checks) or seen in the presets' own sweeps (an int16
# batch matmul stays on the CPU on Ethos-U55/U65 and runs on the NPU on Ethos-U85):
# anything else is shown in the partitioner's words alone.
KNOWN_LIMITS = (
    KnownLimit(
        r"Avgpool2d with padding needs kernel dims < 8",
        ("u55",),
        "Ethos-U55/U65 pool with padding up to 8x8 (Vela: SAME padding 1-8, VALID 1-256): pad the input "
        "explicitly and pool without padding, or use a global mean (adaptive_avg_pool2d to 1x1)",
    ),
    KnownLimit(
        r"Product of axes must be <65536",
        ("u55", "u85"),
        "a mean over more than 65,535 elements at once: reduce in two steps (a mean over one axis, then "
        "over the other), each under the limit (pytorch/executorch#16779)",
    ),
    KnownLimit(
        r"(int16|INT16|16-bit).*not supported|not supported.*(int16|INT16)",
        ("u55", "u85"),
        "this operator has no int16 implementation on this NPU: quantize it (or the model) as int8",
        ("a16w8",),
    ),
    KnownLimit(
        r"unsupported dtype torch\.int16 \(Supports int8\)",
        ("u55",),
        "Ethos-U55/U65 take this operator with int8 inputs only: quantize it as int8 (the rest of the model may "
        "stay int16), or use an Ethos-U85, which runs it in int16",
        ("a16w8",),
    ),
    KnownLimit(
        r"Was first node in partition and input .* had fp dtype",
        ("u55", "u85"),
        "a consequence: the operator before it stays on the CPU, so its input arrives as float; bring that "
        "one onto the NPU and this one follows",
    ),
    KnownLimit(
        r"Partition contained only ops which are removed in the TOSA lowering",
        ("u55", "u85"),
        "a consequence: only a reshape or copy was left between operators on the CPU, nothing to run on the "
        "NPU; it follows its neighbours",
    ),
    KnownLimit(
        r"torch\.bool input that is not supported",
        ("u55",),
        "a boolean operand (a mask from a comparison) has no TOSA type on Ethos-U55/U65: compute the choice "
        "arithmetically (mask * a + (1 - mask) * b on numbers), or use an Ethos-U85, which takes booleans",
    ),
    KnownLimit(
        r"torch\.bool output that is not supported",
        ("u55", "u85"),
        "a boolean result (a comparison, a mask) stays on the CPU: use it through torch.where on "
        "numbers, or keep the mask out of the delegated graph",
    ),
)


# A TOSA specification's name ("TOSA-1.0+INT+int16+int4+u55") in a reason names the profile, not a
# limit of the operator: "int16" in it must not match a 16-bit limit.
TOSA_SPEC = re.compile(r"TOSA-[0-9.]+(\+[A-Za-z0-9]+)*")


def way_round(reason: str, profile: str, scheme: str = "") -> str:
    """The way round a known limit, for an operator held back on this profile in this scheme, or ''."""
    words = TOSA_SPEC.sub("<TOSA profile>", reason or "")
    for limit in KNOWN_LIMITS:
        if profile in limit.families and (not scheme or scheme in limit.schemes) and re.search(limit.pattern, words):
            return limit.way_round
    return ""


def short_name(op: str) -> str:
    """'aten_avg_pool2d_default' -> 'avg_pool2d'."""
    name = op.removeprefix("aten_")
    return re.sub(r"_(default|Tensor|Scalar|int|dim|self|tensor)$", "", name)


def operator_rows(entries: list[dict]) -> list[dict]:
    """`entries`: {model, quant, profile, delegation (the table)}; one row per operator x family x scheme."""
    on_npu: dict[tuple, set] = defaultdict(set)
    on_cpu: dict[tuple, set] = defaultdict(set)
    reasons: dict[tuple, str] = {}
    for entry in entries:
        table = entry["delegation"]
        for op, counts in table.get("operators", {}).items():
            if BOOKKEEPING.search(op):
                continue
            key = (short_name(op), entry["profile"], entry["quant"])
            if counts.get("npu"):
                on_npu[key].add(entry["model"])
            if counts.get("cpu"):
                on_cpu[key].add(entry["model"])
                reason = table.get("cpu_reasons", {}).get(op)
                if reason:
                    reasons.setdefault(key, reason)
    rows = []
    for key in set(on_npu) | set(on_cpu):
        op, profile, quant = key
        held, done = sorted(on_cpu[key]), sorted(on_npu[key] - on_cpu[key])
        where = "CPU" if held and not done and not on_npu[key] else "NPU and CPU" if held else "NPU"
        reason = reasons.get(key, "no reason reported" if held else "")
        rows.append(
            {
                "operator": op,
                "family": FAMILIES.get(profile, profile),
                "scheme": quant,
                "where": where,
                "models_held_back": len(held),
                "models_on_npu": len(on_npu[key]),
                "held_back": " ".join(held),
                "reason": reason,
                "way_round": way_round(reason, profile, quant) if held else "",
            }
        )
    return sorted(rows, key=held_back_first)


def held_back_first(row: dict) -> tuple:
    """The map's order: what holds most models back first, what runs on the NPU last."""
    return (-row["models_held_back"], row["where"] == "NPU", row["operator"], row["family"])


def model_rows(entries: list[dict], npu_macs: dict[tuple, int]) -> list[dict]:
    """One row per model x family x scheme; `npu_macs`: (model, quant, profile) -> Vela's MACs."""
    rows = []
    for entry in entries:
        table, key = entry["delegation"], (entry["model"], entry["quant"], entry["profile"])
        npu, cpu = npu_macs.get(key), table.get("cpu_macs")
        share = round(100 * npu / (npu + cpu), 1) if npu is not None and cpu is not None and npu + cpu else ""
        rows.append(
            {
                "model": entry["model"],
                "family": FAMILIES.get(entry["profile"], entry["profile"]),
                "scheme": entry["quant"],
                "delegated": table.get("delegated", ""),
                "npu_ops": table.get("npu_ops", ""),
                "cpu_compute_ops": table.get("cpu_compute_ops", ""),
                "npu_mac_share_pct": share,
                "npu_macs": npu if npu is not None else "",
                "cpu_macs": cpu if cpu is not None else "",
                "partitions": table.get("partitions", ""),
                "npu_cpu_switches": table.get("switches", ""),
            }
        )
    return rows


def _csv(rows: list[dict], columns: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


# Vela's own refusal of a delegated operator, as the cell's failure reason carries it.
VELA_REJECTION = re.compile(
    r"^(?:vela|fallback): Vela (?:\S+ )?(?:failed on partition \d+|cannot compile .*? in partition \d+ on .*?): "
    r"(?P<message>.*?)(?: \(found in \d+ Vela runs.*?\))?(?: \(reproducer: .*)?(?:; kept on the CPU.*)?$"
)
VELA_OPERATOR = re.compile(r"operation \((?P<op>[A-Za-z0-9_]+)\)")


def vela_rejection_rows(failed: list[dict], compiled: set[tuple]) -> list[dict]:
    """`failed`: summary rows of failed cells ({model, quantization, target, reason}); `compiled`:
    the (model, scheme, family) that compiled in this sweep. One row per operator Vela names (or
    "a partition" when it names none) x family x scheme, with what compiled instead in this sweep."""
    held: dict[tuple, set] = defaultdict(set)
    messages: dict[tuple, str] = {}
    for row in failed:
        found = VELA_REJECTION.match(row.get("reason", ""))
        if not found:
            continue
        profile = tosa_profile(row["target"])
        named = VELA_OPERATOR.search(found["message"])
        kept = row.get("kept", False)
        key = (f"{named['op']} (in Vela)" if named else "a partition (in Vela)", profile, row["quantization"], kept)
        held[key].add(row["model"])
        messages.setdefault(key, found["message"])
    rows = []
    for (op, profile, quant, kept), models in held.items():
        rows.append(
            {
                "operator": op,
                "family": FAMILIES.get(profile, profile),
                "scheme": quant,
                # kept on the CPU by the fallback (vela.fallback), the rest compiled; or the cell failed
                "where": "refused by Vela, kept on the CPU" if kept else "rejected by Vela",
                "models_held_back": len(models),
                "models_on_npu": 0,
                "held_back": " ".join(sorted(models)),
                "reason": f"delegated by the partitioner, then refused by Vela: {messages[(op, profile, quant, kept)]}",
                "way_round": "kept on the CPU, the rest on the NPU (vela.fallback)"
                if kept
                else _compiled_instead(sorted(models), profile, quant, compiled),
            }
        )
    return rows


def kernel_rows(cells: list[dict], vela_summary: list[str]) -> list[dict]:
    """One row per operator that some cell leaves on the CPU without a kernel in the runner's
    libraries x family x scheme: those cells compile, and fail at load on the board."""
    held: dict[tuple, set] = defaultdict(set)
    for cell, path in zip(cells, vela_summary, strict=True):
        if failure_of(path) is not None:
            continue
        for op in (read_json(path).get("cpu_kernels") or {}).get("missing") or []:
            held[(op, cell["tosa_profile"], cell["quant"])].add(cell["model"])
    return [
        {
            "operator": op,
            "family": FAMILIES.get(profile, profile),
            "scheme": quant,
            "where": "CPU, no kernel",
            "models_held_back": len(models),
            "models_on_npu": 0,
            "held_back": " ".join(sorted(models)),
            "reason": "left on the CPU, and none of the runner's kernel libraries (portable, quantized, Cortex-M) "
            "implements it: the program fails at load",
            "way_round": WAY_ROUND,
        }
        for (op, profile, quant), models in sorted(held.items())
    ]


def _compiled_instead(models: list[str], profile: str, quant: str, compiled: set[tuple]) -> str:
    """What this sweep shows does compile for every one of these models: the other scheme on this
    NPU family, or this scheme on the other family. Only what was seen, nothing guessed."""
    ways = []
    for other in sorted({q for _, q, _ in compiled} - {quant}):
        if all((m, other, profile) in compiled for m in models):
            ways.append(f"as {other} on {FAMILIES.get(profile, profile)}")
    for family in sorted({p for _, _, p in compiled} - {profile}):
        if all((m, quant, family) in compiled for m in models):
            ways.append(f"as {quant} on {FAMILIES.get(family, family)}")
    return f"in this sweep these models compile {' and '.join(ways)}" if ways else ""


def write_operator_map(
    profiles: list[dict],
    delegation: list[str],
    cells: list[dict],
    vela_summary: list[str],
    operators: str,
    models: str,
) -> None:
    """The stage: `profiles` ({model, quant, profile}) and `delegation` (their tables) in order; `cells` and
    `vela_summary` in order (each model's MACs on the NPU: Vela's, the same for every cell of a
    profile, taken from its first cell that compiled). A lowering that failed has no table; a
    cell whose Vela run failed carries its record (ethosweep.runtime.outcome), and Vela's
    refusals become rows of their own."""
    entries = [
        {**key, "delegation": read_json(path)}
        for key, path in zip(profiles, delegation, strict=True)
        if failure_of(path) is None
    ]
    macs: dict[tuple, int] = {}
    fell_back: dict[tuple, dict] = {}  # the first fallback cell's record per (model, quant, profile)
    failed = []
    for cell, path in zip(cells, vela_summary, strict=True):
        record = failure_of(path)
        if record is not None:
            failed.append({**_cell_row(cell), "reason": describe(record)})
            continue
        key = (cell["model"], cell["quant"], cell["tosa_profile"])
        compiled = read_json(path)
        if compiled.get("fallback"):  # Vela refused some of it: kept on the CPU, the rest compiled
            failed.append({**_cell_row(cell), "reason": f"fallback: {compiled['fallback']['reason']}", "kept": True})
            fell_back.setdefault(key, compiled)
            continue
        if key not in macs:
            macs[key] = int((compiled.get("cell") or {}).get("nn_macs") or 0)
    rows = operator_rows(entries)
    extra = vela_rejection_rows(failed, set(macs)) + kernel_rows(cells, vela_summary)
    if extra:
        rows = sorted(rows + extra, key=held_back_first)
    atomic_write_text(operators, _csv(rows, OPERATOR_COLUMNS))
    atomic_write_text(models, _csv(model_rows(*with_fallbacks(entries, fell_back, macs)), MODEL_COLUMNS))


def with_fallbacks(
    entries: list[dict], fell_back: dict[tuple, dict], macs: dict[tuple, int]
) -> tuple[list[dict], dict[tuple, int]]:
    """(entries, MACs) for the per-model rows: where no cell of a profile compiled from its lowering
    but some fell back, the lowering those cells compiled from (what Vela refused on the CPU) and
    its MACs. The operator rows stay the partitioner's view of the profile's lowering."""
    out, all_macs = [], dict(macs)
    for entry in entries:
        key = (entry["model"], entry["quant"], entry["profile"])
        if key in macs or key not in fell_back:
            out.append(entry)
            continue
        compiled = fell_back[key]
        table = compiled["fallback"]["delegation"]
        all_macs[key] = int((compiled.get("cell") or {}).get("nn_macs") or 0)
        out.append({**entry, "delegation": {**table, "delegated": f"{table.get('delegated', '')} (fallback)"}})
    return out, all_macs


def _cell_row(cell: dict) -> dict:
    return {"model": cell["model"], "quantization": cell["quant"], "target": cell["target"]}


def format_top(rows: list[dict], limit: int = 10) -> list[str]:
    """The map's top rows for a terminal or a note: what holds most models back."""
    lines = []
    for row in [r for r in rows if int(r["models_held_back"] or 0)][:limit]:
        lines.append(
            f"{row['operator']} on {row['family']} [{row['scheme']}]: held back {row['models_held_back']} model(s) "
            f"({row['held_back']}): {row['reason']}" + (f" -> {row['way_round']}" if row["way_round"] else "")
        )
    return lines
