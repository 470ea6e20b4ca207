"""One model's stages in this process, outside the workflow: train, export, quantize, lower and
verify, each writing its files into one folder under fixed names. For the tests and benchmarks
that check or time a stage on its own (the workflow runs every stage as a job of its own:
workflow/rules). The files:

    weights.pt, train.json                  train
    program.pt2, inputs.pt, reference.pt,   export
    export.json
    <name>.pt2, <name>.quantize.json        quantize (one folder holds several quantizations)
    <name>_lowered/ (or a folder named)     lower: template.pte, tosa/, edge.pt2, delegation.json,
                                            tosa_sources.json, lower.json
    <name>.json, <name>_io.pt               verify
    <cell>/ (a folder named)                vela: model.pte, summary.json, per_layer.csv, compile.json
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def train(folder: Path, model: dict, dataset, settings: dict, seed: int = 0) -> Path:
    """The train stage: the model trained on `dataset`; its weights' path."""
    from ethosweep.zoo.train import train_model

    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "weights.pt"
    train_model(
        model=model,
        seed=seed,
        dataset=dataset,
        train=settings,
        weights=str(weights),
        meta=str(folder / "train.json"),
        base_dir=str(REPO),
    )
    return weights


def export(folder: Path, model: dict, seed: int = 0, weights: Path | None = None) -> None:
    """The export stage (with the train stage's weights, if any)."""
    from ethosweep.compile.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    export_model(
        model=model,
        seed=seed,
        program=str(folder / "program.pt2"),
        inputs=str(folder / "inputs.pt"),
        reference=str(folder / "reference.pt"),
        meta=str(folder / "export.json"),
        weights=str(weights) if weights else None,
        base_dir=str(REPO),
    )


def quantize(
    folder: Path, name: str, scheme: str = "int8", profile: str = "u55", dataset=None, same_as: str | None = None
) -> Path:
    """The quantize stage on the exported program, calibrated as the workflow calibrates (`same_as`:
    another quantization in the folder this one may take, as the u85 profile's takes the u55's)."""
    from ethosweep.compile.quantize import Calibration, OtherQuantization, quantize_model

    quantized = folder / f"{name}.pt2"
    other = OtherQuantization(str(folder / f"{same_as}.pt2"), str(folder / f"{same_as}.quantize.json"))
    quantize_model(
        program=str(folder / "program.pt2"),
        inputs=str(folder / "inputs.pt"),
        quant=scheme,
        tosa_profile=profile,
        quantized=str(quantized),
        meta=str(folder / f"{name}.quantize.json"),
        calibration=Calibration(dataset=dataset),
        same_as=other if same_as else OtherQuantization(),
    )
    return quantized


def lower(folder: Path, name: str, profile: str = "u55", keep_on_cpu: list[dict] = (), into: str = "") -> Path:
    """The lower stage on `<name>.pt2`; the folder it wrote (`into`, or `<name>_lowered`)."""
    from ethosweep.compile.lower import LoweredFiles, lower_to_tosa

    lowered = folder / (into or f"{name}_lowered")
    names = ("template.pte", "tosa", "edge.pt2", "delegation.json", "tosa_sources.json", "lower.json")
    files = LoweredFiles(*(str(lowered / name) for name in names))
    lower_to_tosa(str(folder / f"{name}.pt2"), profile, files, list(keep_on_cpu))
    return lowered


def cell(
    lowered: Path,
    into: Path,
    target: str = "ethos-u55-128",
    system_config: str = "Ethos_U55_High_End_Embedded",
    memory_mode: str = "Shared_Sram",
    **options,
) -> dict:
    """The vela stage on a lowering (`results/lower/<model>/<scheme>/<profile>`, which names the cell's
    model and scheme), for one cell, into a folder; its record. `options`: compile_cell's (vela,
    vela_version, tosa_sources, quantized, ...)."""
    from ethosweep.matrix.cell import Cell
    from ethosweep.vela.compile import CellFiles, Lowering, compile_cell

    into.mkdir(parents=True, exist_ok=True)
    lowering = {k: options.pop(k) for k in ("tosa_sources", "quantized", "profile", "keep_on_cpu") if k in options}
    identity = (lowered.parent.parent.name, lowered.parent.name, target, system_config, memory_mode)
    return compile_cell(
        Lowering(str(lowered / "template.pte"), str(lowered / "lower.json"), **lowering),
        Cell(*identity, options.pop("vela", {}), options.pop("vela_version", None)),
        CellFiles(
            *(str(into / name) for name in ("model.pte", "summary.json", "per_layer.csv", "compile.json", "repro"))
        ),
        **options,
    )


def verify(folder: Path, name: str, lowered: Path, **options) -> dict:
    """The verify stage on `<name>.pt2` and its lowering; its record. `options`: as the verify rule
    names them (NumericsSettings's fields, quantize_meta, delegation, same_as_*)."""
    from ethosweep.verify.job import NumericsSettings, OtherVerification, VerifyFiles
    from ethosweep.verify.numerics import verify_numerics

    other = {
        k.removeprefix(OtherVerification.prefix): options.pop(k) for k in list(options) if k.startswith("same_as_")
    }
    own = {k: options.pop(k) for k in ("quantize_meta", "delegation", "repro") if k in options}

    files = VerifyFiles(
        program=str(folder / "program.pt2"),
        quantized=str(folder / f"{name}.pt2"),
        inputs=str(folder / "inputs.pt"),
        edge=str(lowered / "edge.pt2"),
        lower_meta=str(lowered / "lower.json"),
        tosa_sources=str(lowered / "tosa_sources.json"),
        report=str(folder / f"{name}.json"),
        bundle_io=str(folder / f"{name}_io.pt"),
        **own,
    )
    return verify_numerics(files, NumericsSettings(**options), OtherVerification(**other))
