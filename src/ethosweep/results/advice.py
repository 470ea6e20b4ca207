"""Advice in plain words, derived from a cell's numbers, each piece with the numbers it comes from.

Rules (each fires only when the data supports it):
- an operator stayed on the CPU: which, how many, and the partitioner's reason;
- a top layer is memory-bound: its memory-access cycles exceed its NPU cycles;
- the cell waits on off-chip flash or DRAM for weights: the share of cycles, and what another
  memory mode of the same model and target achieved in this sweep;
- accuracy is lost at a layer: the layer whose SNR against float drops most;
- the cell does not fit a board: the region and by how much, and the memory modes that fit.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from ethosweep.results.table import DOES_NOT_FIT, number


@dataclass(frozen=True)
class Advice:
    title: str
    detail: str  # the numbers behind it

    def as_dict(self) -> dict:
        return {"title": self.title, "detail": self.detail}


MEMORY_BOUND_COLUMNS = ("SRAM AC", "DRAM AC", "OnFlash AC", "OffFlash AC")


def cpu_operators(delegation: dict) -> list[Advice]:
    reasons = delegation.get("cpu_reasons", {})
    return [
        Advice(
            f"{op} runs on the CPU, not the NPU ({count}×)",
            f"The partitioner left it out: {reasons.get(op, 'no reason reported')}. "
            "It runs on the Cortex-M with ExecuTorch's CPU kernels; the graph is split into "
            f"{delegation['partitions']} NPU partitions around it.",
        )
        for op, count in delegation.get("cpu_operators", {}).items()
    ]


def memory_bound_layers(layers: list[dict], top: int = 3) -> list[Advice]:
    advice = []
    for layer in sorted(layers, key=lambda layer: -number(layer.get("Op Cycles"), 0.0))[:top]:
        npu = number(layer.get("NPU"), 0.0)
        memory = {c: number(layer.get(c), 0.0) for c in MEMORY_BOUND_COLUMNS}
        worst = max(memory, key=memory.get)
        if memory[worst] > npu > 0 or (npu == 0 and memory[worst] > 0):
            name = layer.get("Name") or layer.get("NNG Operator")
            advice.append(
                Advice(
                    f"Layer {name} ({layer.get('Original Operator')}) is memory-bound",
                    f"{int(number(layer.get('Op Cycles'), 0.0)):,} cycles, of which {int(memory[worst]):,} are "
                    f"{_access_name(worst)} accesses against {int(npu):,} NPU compute cycles; "
                    f"MAC utilisation {number(layer.get('Util% (MAC)'), 0.0):.1f} %.",
                )
            )
    return advice


def _access_name(column: str) -> str:
    return {"SRAM AC": "SRAM", "DRAM AC": "DRAM", "OnFlash AC": "on-chip flash", "OffFlash AC": "off-chip flash"}[
        column
    ]


def weight_streaming(cell: dict, figures: dict, siblings: dict[str, dict]) -> list[Advice]:
    """`siblings`: memory mode -> Vela cell figures of the same model, scheme and target."""
    total = number(figures.get("cycles_total"), 0.0)
    waiting = {
        "off-chip flash": number(figures.get("cycles_off_chip_flash_access"), 0.0),
        "DRAM": number(figures.get("cycles_dram_access"), 0.0),
    }
    memory, cycles = max(waiting.items(), key=lambda kv: kv[1])
    if not total or cycles / total < 0.3:
        return []
    better = {
        mode: f
        for mode, f in siblings.items()
        if mode != cell["memory_mode"] and number(f.get("cycles_total"), 0.0) < total
    }
    if better:
        mode, best = min(better.items(), key=lambda kv: number(kv[1]["cycles_total"], 0.0))
        weights = (
            f" and its {number(best.get('on_chip_flash_memory_used'), 0.0):.1f} KiB of weights in SRAM too"
            if mode == "Sram_Only"
            else ""
        )
        alternative = (
            f" In this sweep {mode} takes {int(number(best['cycles_total'], 0.0)):,} cycles "
            f"({total / number(best['cycles_total'], 0.0):.1f}× fewer), with "
            f"{number(best.get('sram_memory_used'), 0.0):.1f} "
            f"KiB of SRAM for tensors{weights}."
        )
    else:
        alternative = " Try Sram_Only if the weights fit in SRAM, or a dedicated-SRAM mode with a larger arena cache."
    return [
        Advice(
            f"{100 * cycles / total:.0f} % of the time waits for {memory}",
            f"{int(cycles):,} of {int(total):,} cycles are {memory} accesses (weights stream from "
            f"{figures.get('weights_storage_area', memory)}).{alternative}",
        )
    ]


def numerics(verified: dict | None) -> list[Advice]:
    """The verify stage's verdicts where they say more than that the NPU computes what the quantized
    model computes: what, why, and where (the NPU's question, then the quantization's when flagged)."""
    if not verified or verified.get("verdict") in (None, "identical", "within tolerance"):
        return [*_against_float(verified), *numerics_accuracy_cost(verified)]
    titles = {
        "flagged": "The NPU path is flagged",
        "inconclusive": "Whether the NPU path changes the quantized model is inconclusive",
        "ok": "The NPU path differs from the quantized model, at no accuracy cost shown",
        "unverified": "The numerics are not verified",
        "not verified": "The numerics are not verified (an exploratory sweep)",
    }
    detail = verified["reason"][:1].upper() + verified["reason"][1:] + "."
    return [Advice(titles[verified["verdict"]], detail), *_against_float(verified), *numerics_accuracy_cost(verified)]


def _against_float(verified: dict | None) -> list[Advice]:
    """The quantization's verdict, where it is flagged: what it costs against float, and where."""
    quantization = (verified or {}).get("quantization") or {}
    if quantization.get("verdict") != "flagged":
        return []
    reason = quantization["reason"]
    return [Advice("Quantization costs accuracy against float", reason[:1].upper() + reason[1:] + ".")]


def numerics_accuracy_cost(verified: dict | None) -> list[Advice]:
    """Top-1 lost to quantization on labelled data, with the layer where the SNR drops most."""
    if not verified:
        return []
    metrics, worst = verified.get("metrics", {}), verified.get("worst_layers") or []
    if metrics.get("top1_float") is None or metrics.get("top1_npu") is None:
        return []
    drop = metrics["top1_float"] - metrics["top1_npu"]
    if drop < 0.01:
        return []
    where = (
        f" It is lost most at {worst[0]['layer']}: the SNR against float falls by {worst[0]['snr_drop_db']} dB there "
        f"(to {worst[0]['snr_db']} dB)."
        if worst
        else ""
    )
    return [
        Advice(
            "Quantization costs accuracy",
            f"top-1 {100 * metrics['top1_float']:.1f} % float → {100 * metrics['top1_npu']:.1f} % on the NPU "
            f"path.{where}",
        )
    ]


def board_fit(rows: list[dict]) -> list[Advice]:
    """Rows of one cell on its boards (summary rows with a fit verdict)."""
    return [
        Advice(f"Does not fit {r['board']}", r["fit"].removeprefix("does not fit: ") + ".")
        for r in rows
        if r.get("fit", "").startswith(DOES_NOT_FIT)
    ]
