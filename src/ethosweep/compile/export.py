"""Stage 1, export: the model as a torch.export program, its example inputs
and its float reference outputs. Keyed by model only."""

from __future__ import annotations

import io
import logging
from collections import Counter

import torch
import torch.utils._pytree as pytree

from ethosweep.matrix.models import model_spec_from_params
from ethosweep.runtime.activity import running
from ethosweep.runtime.io import atomic_write_bytes, write_json
from ethosweep.runtime.provenance import tool_versions
from ethosweep.zoo.models import ModelError, initialise, load_model, raised, source_digest

log = logging.getLogger(__name__)


def export_model(
    model: dict,
    seed: int,
    program: str,
    inputs: str,
    reference: str,
    meta: str,
    weights: str | None = None,
    base_dir: str = ".",
) -> dict:
    """Load, run and export one model; write the program, inputs, reference outputs and metadata.

    `weights`: a state_dict written by the train stage, loaded into the model first.
    """
    spec = model_spec_from_params(model)
    module, example_inputs = load_model(spec, seed, base_dir)
    where = f"model '{spec.name}' ({spec.source})"
    if weights:
        module.load_state_dict(torch.load(weights, weights_only=True))
    initialised = initialise(module, spec.init, example_inputs, seed)

    try:
        with torch.no_grad(), running(f"model '{spec.name}'", "running forward() on its example inputs"):
            outputs = module(*example_inputs)
    except (Exception, SystemExit) as error:
        raise ModelError(f"{where}: forward() on ModelInputs {raised(error)}") from error
    try:
        with running("torch.export", f"exporting model '{spec.name}'"):
            exported = torch.export.export(module, example_inputs)
    except (Exception, SystemExit) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelError(
            f"{where}: torch.export failed ({type(error).__name__}: {first}); the model must be "
            "traceable without data-dependent Python control flow"
        ) from error

    flat_outputs = [t.detach() for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    atomic_write_bytes(program, _to_bytes(lambda f: torch.export.save(exported, f)))
    atomic_write_bytes(inputs, _to_bytes(lambda f: torch.save(tuple(example_inputs), f)))
    atomic_write_bytes(reference, _to_bytes(lambda f: torch.save(tuple(flat_outputs), f)))

    ops = Counter(str(node.target) for node in exported.graph_module.graph.nodes if node.op == "call_function")
    record = {
        "model": spec.as_params(),
        "seed": seed,
        "source_sha256": source_digest(spec, base_dir),
        "weights": weights or "as the model builds them (seeded)",
        **({"init": initialised} if initialised else {}),
        "inputs": [_describe(t) for t in example_inputs],
        "outputs": [_describe(t) for t in flat_outputs],
        "parameters": sum(p.numel() for p in module.parameters()),
        "aten_ops": dict(sorted(ops.items())),
        "versions": tool_versions(),
    }
    write_json(meta, record)
    log.info("exported %s: %d parameters, %d graph ops", spec.name, record["parameters"], sum(ops.values()))
    return record


def _describe(value) -> dict:
    if isinstance(value, torch.Tensor):
        # bytes: what a runner holds for it (the firmware plan sizes its pools from them, torch-free)
        return {
            "shape": list(value.shape),
            "dtype": str(value.dtype).removeprefix("torch."),
            "bytes": value.numel() * value.element_size(),
        }
    return {"type": type(value).__name__}


def _to_bytes(save) -> bytes:
    buffer = io.BytesIO()
    save(buffer)
    return buffer.getvalue()
