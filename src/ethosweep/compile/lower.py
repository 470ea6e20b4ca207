"""Stage 3, lower: EthosUPartitioner -> TOSA, once per (model, scheme, TOSA profile).

The flow is aot_arm_compiler's (`--delegate --quantize`): to_edge_transform_and_lower
with EthosUPartitioner, then ReplaceQuantNodesPass (the CPU-side quantize and
dequantize become cortex_m ops, as the bare-metal runner expects), then
to_executorch. Everything in it but Vela depends only on the TOSA profile: a cell's
target, system config, memory mode and Vela options reach only Vela's flags and the
delegates' compile specs. So this stage runs the flow once per profile with Vela left
out (each delegate's payload is its TOSA flatbuffer), and the vela stage builds every
cell's .pte from that *template* by compiling each partition's TOSA with Vela and
putting the payload and the cell's compile specs in place (ethosweep.vela.compile). The
result is byte-identical to the full flow for the cell (tests/test_compile_once.py).

Kept for the cells and the verify stage:
- `template.pte`: the profile's program, delegates carrying TOSA (not runnable as is);
- `tosa/partition_<i>.tosa`: each delegated partition's TOSA flatbuffer;
- `edge.pt2`: the lowered edge program (ExecuTorch's own serialisation, which keeps the
  delegates): the CPU-side graph the verify stage runs with each delegate on the TOSA
  reference model;
- `delegation.json`: operators on the NPU and on the CPU, with the partitioner's reasons;
- `tosa_sources.json`: per partition, each TOSA tensor's provenance (the exported nodes it comes
  from), which the verify stage uses to compare the NPU path layer by layer (ethosweep.verify.locate).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ethosweep.compile.artifacts import load_quantized
from ethosweep.compile.delegation import delegate_payloads, lower_program
from ethosweep.matrix import targets as tg
from ethosweep.runtime.io import atomic_write_bytes, write_json
from ethosweep.runtime.provenance import tool_versions

log = logging.getLogger(__name__)

# Run by ExecuTorch's Arm backend on this stage's behalf (its TOSA backend writes every
# partition with tosa-tools' serializer): a tosa-tools upgrade reruns the lowering
# (ethosweep.runtime.packages). Vela is left out here, so a Vela upgrade does not.
ALSO_RUNS = ("tosa-tools",)


@dataclass(frozen=True)
class LoweredFiles:
    """What the lower stage writes: the .pte template, each partition's TOSA (in `tosa_dir`), the edge
    program, the delegation table, where each TOSA tensor comes from, and its record."""

    template: str
    tosa_dir: str
    edge: str
    delegation: str
    tosa_sources: str
    meta: str


def lower_to_tosa(quantized: str, tosa_profile: str, files: LoweredFiles, keep_on_cpu: list[dict] = ()) -> dict:
    """Lower one (model, scheme, TOSA profile); write the template, each partition's TOSA,
    the edge program, the delegation table and metadata. `keep_on_cpu`: what the model's config
    keeps on the CPU (keep_on_cpu_checks)."""
    profile = tosa_profile  # the workflow's name (runtime.binding)
    started = time.perf_counter()
    result = lower_program(load_quantized(quantized), profile, keep_on_cpu)
    template_bytes, edge_bytes, table, planned = result.template, result.edge, result.table, result.planned
    sources = result.sources
    partitions = delegate_payloads(template_bytes)

    tosa_path = Path(files.tosa_dir)
    tosa_path.mkdir(parents=True, exist_ok=True)
    for index, tosa in enumerate(partitions):
        atomic_write_bytes(tosa_path / f"partition_{index}.tosa", tosa)
    atomic_write_bytes(files.edge, edge_bytes)
    write_json(files.delegation, table)
    write_json(files.tosa_sources, sources)
    atomic_write_bytes(files.template, template_bytes)
    record = {
        "tosa_profile": profile,
        "tosa_spec": tg.tosa_spec(profile),
        "template_bytes": len(template_bytes),
        "template_sha256": hashlib.sha256(template_bytes).hexdigest(),
        "edge_bytes": len(edge_bytes),
        "edge_sha256": hashlib.sha256(edge_bytes).hexdigest(),
        "planned_buffer_bytes": planned,
        "partitions": [
            {
                "index": i,
                "tosa": f"partition_{i}.tosa",
                "tosa_bytes": len(t),
                "tosa_sha256": hashlib.sha256(t).hexdigest(),
            }
            for i, t in enumerate(partitions)
        ],
        "delegated": table["delegated"],
        **({"keep_on_cpu": list(keep_on_cpu)} if keep_on_cpu else {}),
        "seconds": round(time.perf_counter() - started, 2),
        "versions": tool_versions(),
    }
    write_json(files.meta, record)
    log.info(
        "lowered to %s: %d partition(s), %s delegation, %d operators on the NPU, in %.1f s",
        record["tosa_spec"],
        len(partitions),
        table["delegated"],
        table["npu_ops"],
        record["seconds"],
    )
    for op, count in table["cpu_operators"].items():
        log.info("left on the CPU: %s x%d (%s)", op, count, table["cpu_reasons"].get(op, "no reason reported"))
    return record
