"""Stage: verify the numerics of a quantized, lowered model on real data, before any firmware.

For every evaluation sample it runs
- the float model (the exported program),
- the quantized model in PyTorch (quantize/dequantize simulated in float: the int reference),
- the model as the NPU computes it: the lowered graph, with each delegated partition run
  by the TOSA reference model (tosa-tools' `tosa_reference_model`, the functional
  specification of what the NPU computes) and the CPU-side operators (quantize,
  dequantize, operators the NPU cannot run) run by PyTorch,
and compares them: top-1 accuracy (with labels), top-1 agreement, the error between the
NPU path and the quantized model in output quantization steps (ExecuTorch's own tests
require at most 1), cosine similarity and SNR against float, and per-layer SNR of the
quantized model against float to locate where accuracy is lost.

Keyed by (model, scheme, TOSA profile), like the lower stage whose edge program it runs:
the TOSA the NPU runs depends on nothing else (Vela compiles it per cell, but the graph it
compiles is the same); each partition's sha256 is recorded and the summary checks it
against the TOSA every cell's .pte was compiled from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ethosweep.compile.artifacts import RANDOM, evaluation_set, load_edge, load_quantized, load_tensors
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError, of_the_machine
from ethosweep.runtime.integrity import verify as verify_artifact
from ethosweep.runtime.io import atomic_write_bytes, read_json, write_json
from ethosweep.runtime.outcome import failure_of
from ethosweep.runtime.provenance import tool_versions
from ethosweep.verify.job import SAME_AS_REPORT, NumericsSettings, OtherVerification, VerifyFiles
from ethosweep.verify.locate import (
    locate,
)
from ethosweep.verify.metrics import compare, output_scales, output_tolerances
from ethosweep.verify.quantization_loss import layer_report
from ethosweep.verify.reference import NpuInterpreter, flat, in_fork, npu_outputs
from ethosweep.verify.verdicts import Evidence, judge, random_samples_needed
from ethosweep.zoo.datasets import load_splits

log = logging.getLogger(__name__)


def tosa_partitions(graph_module) -> list[bytes]:
    return [
        getattr(graph_module, n.target).processed_bytes
        for n in graph_module.graph.nodes
        if n.op == "get_attr" and n.target.startswith("lowered_module")
    ]


def profile_verified_alike(files: VerifyFiles, other: OtherVerification) -> str | None:
    """The other profile, if its verification verifies what this one would: the same quantized
    program (the quantize stage took the other profile's, `same_as`), byte-identical TOSA
    partitions delegating the same operators (the same delegation table and TOSA tensor sources),
    so the same three paths run on the same samples. (The edge programs differ only in the
    delegates' compile specs and ids.) Read from the two lowerings, not from the verification,
    which may not have run yet. Any record of a failure among them: not alike (None)."""
    paths = [files.quantize_meta, files.lower_meta, files.tosa_sources, files.delegation]
    paths += [other.lower_meta, other.tosa_sources, other.delegation]
    if not all(paths) or any(failure_of(path) is not None for path in paths):
        return None
    if "same_as" not in read_json(files.quantize_meta):
        return None
    ours, theirs = read_json(files.lower_meta), read_json(other.lower_meta)
    alike = (
        all(ours.get(key) == theirs.get(key) for key in ("partitions", "delegated", "planned_buffer_bytes"))
        and read_json(files.tosa_sources) == read_json(other.tosa_sources)
        and read_json(files.delegation) == read_json(other.delegation)
    )
    return theirs.get("tosa_profile") if alike else None


def _point_to(other: OtherVerification, profile: str, files: VerifyFiles, started: float) -> dict:
    """This profile's verification is the other one's: a record that says where it is (read through
    ethosweep.results.table.verification_of) and test cases that point to its."""
    record = {
        "same_as": f"the {profile} profile's verification (same quantized program, TOSA partitions and delegation)",
        SAME_AS_REPORT: other.report,
        "seconds": {"load": 0.0, "total": round(time.perf_counter() - started, 2)},
    }
    buffer = io.BytesIO()
    torch.save({"same_as": other.bundle_io}, buffer)
    atomic_write_bytes(files.bundle_io, buffer.getvalue())
    write_json(files.report, record)
    log.info("verified: the same as the other profile's verification (%s)", other.report)
    return record


def verify_numerics(
    files: VerifyFiles, settings: NumericsSettings, same_as: OtherVerification = OtherVerification()
) -> dict:
    """Verify one (model, scheme, TOSA profile): metrics, a verdict (ethosweep.verify.verdicts) and, where the
    NPU path differs from the quantized model, the layer where it starts (ethosweep.verify.locate).
    `same_as`: another profile's verification, taken where it verified the same thing (see
    profile_verified_alike)."""
    started = time.perf_counter()
    alike = same_as.given() and profile_verified_alike(files, same_as)
    if alike:
        return _point_to(same_as, alike, files, started)
    thresholds = settings.thresholds()
    paths = ThreePaths.load(files.program, files.quantized, files.edge, files.lower_meta)
    example_inputs = load_tensors(files.inputs)
    is_classifier = settings.classifier
    if is_classifier is None:
        is_classifier = _has_labels(settings.dataset, example_inputs, settings.seed)
    # fixed before any output is looked at: an interval read at a number of samples chosen by what it
    # showed would not hold its coverage
    count, why = random_samples_needed(settings.random_samples, is_classifier, thresholds)
    loaded_in = time.perf_counter() - started
    repro = files.repro or Path(files.report).parent / "repro"
    sampled = Sampled(paths, example_inputs, settings.dataset, settings.seed, settings.evaluation_samples, repro)
    sampled.draw(count)
    held_out = f"{len(sampled.samples)} held-out samples (numerics.evaluation_samples)"
    record = _measured(paths, sampled, files, settings, thresholds, is_classifier, why if sampled.cheap else held_out)
    record["seconds"] = {"load": round(loaded_in, 2), "total": round(time.perf_counter() - started, 2)}
    record["versions"] = tool_versions()
    buffer = io.BytesIO()
    inputs, expected = sampled.samples[: settings.bundle_samples], sampled.outputs[1][: settings.bundle_samples]
    torch.save({"inputs": inputs, "expected": [tuple(o) for o in expected]}, buffer)
    atomic_write_bytes(files.bundle_io, buffer.getvalue())
    write_json(files.report, record)
    log.info(
        "verified on %s in %.1f s: %s; %s: %s; quantization: %s",
        record["data"],
        record["seconds"]["total"],
        {k: v for k, v in record["metrics"].items() if v is not None and not isinstance(v, (list, dict))},
        record["verdict"].upper(),
        record["reason"],
        record["quantization"]["verdict"],
    )
    return record


def _measured(
    paths, sampled, files: VerifyFiles, settings: NumericsSettings, thresholds, is_classifier: bool, sampling: str
) -> dict:
    """The metrics on the drawn samples, the layer tables, the location of any difference and the two
    verdicts: the record without its timings."""
    scales, allowed = output_scales(paths.npu_module), output_tolerances(paths.quant_module, thresholds)
    metrics = sampled.metrics(scales, is_classifier, allowed)
    samples = sampled.samples
    with torch.no_grad():
        layers = layer_report(paths.float_module, paths.quant_module, samples)
    worst = sorted(
        (layer for layer in layers if layer["snr_drop_db"] is not None), key=lambda layer: -layer["snr_drop_db"]
    )[:3]
    worst_sample = metrics.pop("worst_sample", None)
    location = None
    if metrics.get("max_error_steps"):  # any difference: where it comes from, on the sample where it is largest
        sources = read_json(files.tosa_sources)
        location = locate_on(paths.npu_module, paths.quant_module, samples[worst_sample], sources)
    untrained = untrained_weights(paths.exported.state_dict)
    has_data = RANDOM if settings.dataset == RANDOM else settings.dataset is not None
    evidence = Evidence(has_data, untrained, worst[0] if worst else None)
    verdict = judge(metrics, location, thresholds, is_classifier, evidence)
    return {
        "data": sampled.described,
        "samples": len(samples),
        "sampling": sampling,
        "classifier": is_classifier,
        "classifier_evidence": _classifier_evidence(settings.classifier, sampled.labels),
        "untrained_weights": untrained,
        **verdict.as_dict(),
        "metrics": metrics,
        "location": location,
        "worst_layers": worst,
        "layers": layers,
        "tosa_partitions": [
            {"index": i, "tosa_sha256": hashlib.sha256(b).hexdigest()}
            for i, b in enumerate(tosa_partitions(paths.npu_module))
        ],
        "thresholds": thresholds.__dict__,
    }


class Sampled:
    """The evaluation samples and the three paths' outputs on them, drawn in order: a larger draw of
    random inputs starts with the earlier one (one seeded generator), so only the new samples run."""

    def __init__(self, paths, example_inputs, dataset, seed: int, evaluation_samples: int, repro):
        self.paths, self.example_inputs, self.dataset, self.seed = paths, example_inputs, dataset, seed
        self.evaluation_samples, self.repro = evaluation_samples, Path(repro)
        self.cheap = dataset is None or dataset == RANDOM  # random inputs: more cost only their runs
        self.samples, self.labels, self.described, self.outputs = [], None, "", ([], [], [])

    def draw(self, count: int) -> None:
        samples, self.labels, self.described = evaluation_set(
            self.example_inputs, self.dataset, self.seed, self.evaluation_samples, count
        )
        new = samples[len(self.samples) :]
        ran = self.paths.run(new, self.repro, first=len(self.samples))
        self.outputs = tuple(done + more for done, more in zip(self.outputs, ran))
        self.samples = samples

    def metrics(self, scales, classifier: bool, allowed) -> dict:
        return compare(*self.outputs, scales, self.labels, classifier, allowed)


@dataclass
class ThreePaths:
    """The model three ways: float (the exported program), quantized (PyTorch, quantize/dequantize
    simulated), and as the NPU computes it (the lowered graph, its partitions on the TOSA reference model)."""

    exported: torch.export.ExportedProgram
    float_module: torch.nn.Module
    quant_module: torch.nn.Module
    npu_module: torch.nn.Module

    @classmethod
    def load(cls, program: str, quantized: str, edge: str, lower_meta: str) -> "ThreePaths":
        exported = torch.export.load(program)
        lowered = read_json(lower_meta)
        verify_artifact(edge, lowered["edge_bytes"], lowered["edge_sha256"], "the lower stage")
        return cls(exported, exported.module(), load_quantized(quantized).module(), load_edge(edge).module())

    def run(self, samples: list[tuple], repro: Path, first: int = 0) -> tuple[list, list, list]:
        """Each path's outputs on each sample (flattened tensors; `first`: the first one's index). The
        NPU path's run in a fork (ethosweep.verify.reference): a crash of the reference model leaves
        a reproducer in `repro`."""
        with torch.no_grad():
            float_out = [flat(self.float_module(*sample)) for sample in samples]
            quant_out = [flat(self.quant_module(*sample)) for sample in samples]
        return float_out, quant_out, npu_outputs(self.npu_module, samples, repro, first)


def _classifier_evidence(classifier: bool | None, labels) -> str:
    if classifier is not None:
        return "config (classifier: " + str(classifier).lower() + ")"
    return "labelled data" if labels is not None else "none: judged as a regression model"


def _has_labels(dataset, example_inputs: tuple, seed: int) -> bool:
    if dataset is None or dataset == RANDOM:
        return False
    return load_splits(dataset, example_inputs, seed).eval_y is not None


def locate_on(npu_module, quant_module, sample: tuple, tensor_sources: list) -> dict:
    """ethosweep.verify.locate for one sample: the delegates' inputs as the NPU path gives them. It
    runs the reference model on every partition's intermediates, so in a fork; whatever stops it is
    said as its `problem` (a failed diagnosis must not hide the measurement), but the machine's faults."""
    try:
        with running("ethosweep's layer-by-layer comparison", "on the TOSA reference model"):
            return in_fork(_locate, npu_module, quant_module, sample, tensor_sources)
    except StageError as error:
        if of_the_machine(error):
            raise
        log.warning("could not compare layer by layer: %s", error)
        return {"layers": [], "unpaired": [], "problem": str(error)}


def _locate(npu_module, quant_module, sample: tuple, tensor_sources: list) -> dict:
    interpreter = NpuInterpreter(npu_module)
    with torch.no_grad():
        interpreter.run(*sample)
        location = locate(quant_module, sample, interpreter.delegate_calls, tensor_sources, cpu_operators(npu_module))
    return location.as_dict()


def cpu_operators(npu_module) -> frozenset[str]:
    """The operators the lowered program runs on the CPU, by name ('avg_pool2d')."""
    from ethosweep.verify.layers import operator_name

    return frozenset(
        operator_name(n.target)
        for n in npu_module.graph.nodes
        if n.op == "call_function" and n.target is not torch.ops.higher_order.executorch_call_delegate
    )


def untrained_weights(state_dict: dict) -> str:
    """Why the weights look untrained, or '' (a heuristic, named as such in the reason).

    - every BatchNorm still has its initial statistics (running mean 0, variance 1);
    - or the weight matrices are uniformly distributed, as PyTorch's default initialisation
      draws them (excess kurtosis of a uniform distribution: -1.2; trained weights are peaked,
      above -1 in practice).
    """
    means = [t for name, t in state_dict.items() if name.endswith("running_mean")]
    variances = [t for name, t in state_dict.items() if name.endswith("running_var")]
    if means and all(bool((m == 0).all()) for m in means) and all(bool((v == 1).all()) for v in variances):
        return "the weights look untrained: every BatchNorm still has its initial statistics (mean 0, variance 1)"
    weights = [
        t.detach().double().flatten()
        for name, t in state_dict.items()
        if name.endswith("weight") and t.dim() >= 2 and t.numel() >= 256
    ]
    if not weights:
        return ""
    kurtosis = [float(((w - w.mean()) ** 4).mean() / (w.var(unbiased=False) ** 2) - 3) for w in weights]
    uniform = sum(1 for k in kurtosis if -1.35 <= k <= -1.05)
    if uniform >= 0.8 * len(weights):
        return (
            f"the weights look untrained: {uniform} of {len(weights)} weight tensors are uniformly distributed, "
            "as PyTorch initialises them"
        )
    return ""


# ---- cells that fell back ----------------------------------------------------------------------


def verify_fallbacks(
    cells: list[str],
    compile_meta: list[str],
    tosa_profile: str,
    report: str,
    program: str,
    quantized: str,
    inputs: str,
    settings: NumericsSettings,
) -> dict:
    """Verify the lowerings the profile's fallback cells compiled from (what Vela refused kept on the
    CPU: ethosweep.vela.fallback), as verify_numerics verifies the profile's own: the NPU partitions on
    the TOSA reference model, the operators on the CPU in PyTorch as the program runs them, against the
    quantized model and float. One verification per distinct set of kept operators (cells whose Vela
    refused the same parts share it); none, and no lowering, for a profile whose cells did not fall
    back. `cells` (ids) and `compile_meta` in order; `settings`: the numerics settings verify_numerics
    takes (the model's data, thresholds, sample counts)."""
    profile = tosa_profile  # the workflow's name (runtime.binding)
    lowerings: dict[str, dict] = {}
    for cell, path in zip(cells, compile_meta, strict=True):
        fallback = read_json(path).get("fallback") if failure_of(path) is None else None
        if fallback:
            key = json.dumps(fallback["keep_on_cpu"], sort_keys=True)
            lowerings.setdefault(key, {"keep_on_cpu": fallback["keep_on_cpu"], "cells": []})["cells"].append(cell)
    models = {"program": program, "quantized": quantized, "inputs": inputs}
    verifications = [_verify_lowering(entry, profile, models, settings) for entry in lowerings.values()]
    record = {"verifications": verifications, "versions": tool_versions()}
    write_json(report, record)
    log.info(
        "%d fallback lowering(s) verified for %d cell(s)",
        len(verifications),
        sum(len(e["cells"]) for e in lowerings.values()),
    )
    return record


def _verify_lowering(entry: dict, profile: str, models: dict, settings: NumericsSettings) -> dict:
    """One fallback lowering, lowered again (the Vela job kept no edge program) and verified in a
    folder of its own; what the summary and the report need of it. With a store set
    (ethosweep.runtime.cache), taken from it when it holds this verification: the same programs,
    inputs and data, profile, kept operators, settings, code and tool versions."""
    from ethosweep.runtime import cache
    from ethosweep.runtime.codeversion import code_version
    from ethosweep.runtime.packages import stage_versions

    files = {name: cache.content_digest(path) for name, path in models.items()}
    dataset = settings.dataset
    if isinstance(dataset, dict) and dataset.get("path"):  # the model's own data files
        files["dataset"] = cache.content_digest(dataset["path"])
    parts = {
        "files": files,
        "settings": dataclasses.asdict(settings),
        "profile": profile,
        "keep_on_cpu": entry["keep_on_cpu"],
        "code": code_version("ethosweep.verify.numerics"),
        # every package the verification runs, as the verify rule's key has them
        "tools": stage_versions("ethosweep.verify.numerics"),
    }
    verified = cache.remembered(
        "fallback verification",
        parts,
        lambda: {"record": json.dumps(_verified_lowering(entry, profile, models, settings)).encode()},
    )
    return {"cells": entry["cells"], **json.loads(verified["record"])}


def _verified_lowering(entry: dict, profile: str, models: dict, settings: NumericsSettings) -> dict:
    import tempfile

    from ethosweep.compile.delegation import lower_quantized

    with tempfile.TemporaryDirectory(prefix="ethosweep-fallback-") as folder:
        lowered = lower_quantized(models["quantized"], profile, entry["keep_on_cpu"])
        edge, sources, meta = Path(folder, "edge.pt2"), Path(folder, "tosa_sources.json"), Path(folder, "lower.json")
        atomic_write_bytes(edge, lowered.edge)
        write_json(sources, lowered.sources)
        write_json(meta, {"edge_bytes": len(lowered.edge), "edge_sha256": hashlib.sha256(lowered.edge).hexdigest()})
        files = VerifyFiles(
            **models,
            edge=str(edge),
            lower_meta=str(meta),
            tosa_sources=str(sources),
            report=str(Path(folder, "verify.json")),
            bundle_io=str(Path(folder, "bundle_io.pt")),
        )
        record = verify_numerics(files, settings)
    kept = (
        "verdict",
        "reason",
        "layer",
        "quantization",
        "checks",
        "samples",
        "data",
        "sampling",
        "metrics",
        "tosa_partitions",
    )
    return {"keep_on_cpu": entry["keep_on_cpu"], **{k: record[k] for k in kept}}
