"""When Vela refuses operators: the model lowered again with them kept on the CPU (`vela.fallback`).

The cell's Vela job located what Vela refuses (ethosweep.vela.refusals) in the model's terms. The
quantized program is lowered again for the cell's TOSA profile with those nodes left out of the
partitions (the lower stage's own lowering, with ExecuTorch's DontPartitionName checks), and Vela
compiles the rest with the cell's flags. What to keep, in the order tried (VelaFailure.fallbacks):
first only the elementwise operators that join the refused parts' accumulators (a residual add,
so the layers around it stay on the NPU), then every node of the refused parts; at most two
lowerings. When none works, the cell fails saying what Vela refused, why each attempt failed, and
where the reproducer is. A failure of the machine during an attempt (memory, disk) ends the job as
such: the next run retries it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ethosweep.compile.delegation import delegate_payloads
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError, of_the_machine
from ethosweep.vela.partitions import VelaFailure, VelaRun


@dataclass
class Fallback:
    """What the cell compiled from: the lowering with the refused operators on the CPU (its template
    and TOSA partitions), Vela's results on them, and the record the cell keeps of it."""

    template: bytes
    tosas: list[bytes]
    payloads: list
    rows: list
    layers: list
    planned_buffer_bytes: int
    delegated: str
    record: dict


def compile_by_fallback(
    refused: VelaFailure, quantized: str, profile: str, keep_on_cpu: list[dict], run: VelaRun, vela_version: str
) -> Fallback:
    """Lower `quantized` again with what Vela `refused` kept on the CPU (beside the model's own
    `keep_on_cpu`), and compile the rest with `run` (the cell's Vela). The Fallback, or the
    VelaFailure that says what was refused and why each attempt failed."""
    from ethosweep.compile.delegation import lower_quantized

    started = time.perf_counter()
    attempts = []
    # Not the cell's target or memory mode: what is kept decides the lowering, and the same nodes
    # kept are the same lowering and verification for every cell that keeps them (each Ethos-U55/U65
    # target of the profile, each memory mode, each results folder: ethosweep.runtime.cache).
    why = f"refused by Vela {vela_version}, kept on the CPU (vela.fallback)"
    for nodes in refused.fallbacks():
        keep = [*keep_on_cpu, *({"node": n, "why": why} for n in nodes)]
        try:
            with running("ExecuTorch's Arm lowering", f"lowering again with {len(nodes)} node(s) on the CPU"):
                relowered = lower_quantized(quantized, profile, keep)
            tosas = delegate_payloads(relowered.template)
            # whether the rest compiles: not explained again (no locating, the refusal's reproducer kept)
            payloads, rows, layers = run.compile_all(tosas, explain=False)
        except StageError as error:
            if of_the_machine(error):
                raise  # the machine's, not the model's: the job fails and the next run retries it
            attempts.append({"kept_on_cpu": nodes, "failed": _attempt_failure(error)})
            continue
        attempts.append({"kept_on_cpu": nodes, "failed": ""})
        record = {
            **refused.details,
            "reason": refused.reason,
            "reproducer": refused.reproducer,
            "keep_on_cpu": keep,
            "delegation": relowered.table,
            "attempts": attempts,
            "seconds": round(time.perf_counter() - started, 2),
        }
        return Fallback(
            relowered.template,
            tosas,
            payloads,
            rows,
            layers,
            relowered.planned,
            relowered.table["delegated"],
            record,
        )
    said = "; ".join(f"{_nodes(a['kept_on_cpu'])} on the CPU, {a['failed']}" for a in attempts)
    raise VelaFailure(
        f"{refused.reason}; falling back did not work: {said} (reproducer: {refused.reproducer})",
        refused.fault,
        reproducer=refused.reproducer,
        details={**refused.details, "fallback": {"attempts": attempts}},
        reproduced=refused.reproduced,
    ) from refused


def _attempt_failure(error: StageError) -> str:
    if isinstance(error, VelaFailure):
        return f"Vela refused the rest too: {error.reason}"
    return f"ExecuTorch could not lower the rest: {' '.join(str(error).split())[:300]}"


def _nodes(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if nodes[3:] else "")
    return f"with {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({shown})"
