"""The experiment matrix: a validated config expanded into cells.

A *cell* is one model compiled for one Ethos-U configuration:
model x quantization x target x system config x memory mode (+ Vela options).
The matrix is expanded here, in one place, and nowhere else.

Torch-free: the Snakefile builds the matrix at parse time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from ethosweep.matrix import boards as bd
from ethosweep.matrix import targets as tg
from ethosweep.matrix.cell import Cell, CpuCell, VelaOptions
from ethosweep.matrix.models import InputSpec, ModelSpec
from ethosweep.matrix.sweep import Sweep

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,3}$")  # a release number, as PyPI lists ethos-u-vela's
QUANT_SCHEMES = ("int8", "a16w8")


class ConfigError(ValueError):
    """A config the workflow cannot run; the message names the key and the fix."""


@dataclass(frozen=True)
class TargetEntry:
    target: str
    system_config: str
    vela: VelaOptions
    ini: tg.VelaIni
    vela_versions: tuple[str | None, ...] = (None,)


def dataset_files(dataset: Any, base_dir: Path | str = ".") -> list[str]:
    """The user files a dataset reads: inputs of the rules that use it, so edits rerun them."""
    if not isinstance(dataset, dict) or "path" not in dataset:
        return []
    path = Path(base_dir) / dataset["path"]
    if path.is_dir():
        return sorted(str(p.relative_to(base_dir)) for p in path.rglob("*") if p.suffix in (".pt", ".npz"))
    return [dataset["path"]]


def build_sweep(config: dict[str, Any], base_dir: Path | str = ".", workflow_dir: Path | str | None = None) -> Sweep:
    """Expand a schema-validated config into the matrix of cells.

    `base_dir` is where relative file paths in the config are resolved (the
    workflow's working directory); `workflow_dir` is the repository with the
    built-in board profiles (default: the one this package lives in). Raises
    ConfigError with a message naming the key, the value and what is allowed.
    """
    base = Path(base_dir)
    axes = _axes(config, base)
    boards = _boards(
        config.get("boards", []),
        config.get("board_files", []),
        base,
        Path(workflow_dir) if workflow_dir else WORKFLOW_DIR,
    )
    cells, skipped = _product(axes)
    for i, selector in enumerate(config.get("exclude", [])):
        _check_selector(selector, f"exclude[{i}]", axes)
        cells = [c for c in cells if not _matches(c, selector)]
    for i, selector in enumerate(config.get("include", [])):
        cells.extend(_included_cells(selector, f"include[{i}]", axes))
    on_boards, cell_boards = _board_cells(boards, axes)
    configured = {c.id for c in cells}
    cells = list({c.id: c for c in cells + on_boards}.values())
    if not cells:
        raise ConfigError(
            "the matrix is empty: no model x target x memory mode combination is left "
            "(check `memory_modes`, `exclude` and the skipped combinations: "
            + ("; ".join(f"{c}: {r}" for c, r in skipped) or "none")
            + ")"
        )
    return Sweep(
        models=axes.models,
        quantization=axes.quantization,
        cells=cells,
        seed=int(config.get("seed", 0)),
        skipped=skipped,
        numerics=_numerics(config.get("numerics", {})),
        boards=boards,
        cell_boards=cell_boards,
        cpu_cells=_cpu_cells(config.get("cpu_targets", []), axes.models, axes.quantization, skipped),
        only_for_boards=[c.id for c in cells if c.id not in configured],
    )


@dataclass(frozen=True)
class _Axes:
    """The config's axes, checked: what the matrix is the product of, and what an include falls back on."""

    models: dict[str, ModelSpec]
    quantization: tuple[str, ...]
    entries: list[TargetEntry]
    memory_modes: list[str]
    vela: VelaOptions  # the config's `vela`, for a cell no target entry gives its own
    vela_versions: tuple[str | None, ...]
    system_configs: dict[str, str]
    base: Path


def _axes(config: dict[str, Any], base: Path) -> _Axes:
    models = _models(config["models"], base)
    vela = _vela_options(config.get("vela", {}), None, "vela", base)
    versions = _vela_versions(config.get("vela", {}), (None,), "vela")
    targets = config.get("targets", [])
    entries = _target_entries(
        list(tg.TARGETS) if targets == "all" else targets,
        config.get("system_configs", {}),
        vela,
        base,
        allow_empty=bool(config.get("boards")),
        global_versions=versions,
    )
    return _Axes(
        models=models,
        quantization=tuple(config.get("quantization", ["int8"])),
        entries=entries,
        memory_modes=_memory_modes(config.get("memory_modes", []), entries),
        vela=vela,
        vela_versions=versions,
        system_configs=config.get("system_configs", {}),
        base=base,
    )


def _product(axes: _Axes) -> tuple[list[Cell], list[tuple[str, str]]]:
    """Every model x scheme x target entry x memory mode (x Vela version), and the combinations
    Vela does not accept, each said once (it recurs for every model and scheme)."""
    cells, skipped = [], []
    for model in axes.models:
        for quant in axes.quantization:
            for entry in axes.entries:
                for mode in axes.memory_modes:
                    reason = _combination_reason(entry, mode)
                    if reason is not None:
                        skipped.append((f"{entry.target} x {entry.system_config} x {mode}", reason))
                        continue
                    cells.extend(
                        Cell(model, quant, entry.target, entry.system_config, mode, entry.vela, version)
                        for version in entry.vela_versions
                    )
    return cells, list(dict.fromkeys(skipped))


def _board_cells(boards: dict[str, "bd.Board"], axes: _Axes) -> tuple[list[Cell], dict[str, list[str]]]:
    """The cells each board's configuration adds, and the boards each cell is on."""
    cells, cell_boards = [], {}
    for board in boards.values():
        for model in axes.models:
            for quant in axes.quantization:
                for mode in board.memory_modes:
                    for version in axes.vela_versions:
                        cell = Cell(model, quant, board.target, board.system_config, mode, axes.vela, version)
                        cells.append(cell)
                        cell_boards.setdefault(cell.id, []).append(board.name)
    return cells, cell_boards


def _cpu_cells(cpus: list[str], models, quantization, skipped: list) -> list[CpuCell]:
    """model x scheme x CPU for the CPU-only targets; schemes the Cortex-M quantizer lacks are skipped."""
    cells = []
    for cpu in cpus:
        if cpu not in tg.CPU_TARGETS:
            raise ConfigError(f"cpu_targets: unknown CPU {cpu!r}; allowed: {', '.join(tg.CPU_TARGETS)}")
        for quant in quantization:
            if quant not in tg.CPU_SCHEMES:
                skipped.append((f"{cpu} x {quant}", f"the Cortex-M quantizer has {', '.join(tg.CPU_SCHEMES)} only"))
                continue
            cells.extend(CpuCell(model, quant, cpu) for model in models)
    return cells


def _boards(names: list[str], extra_files: list[str], base: Path, workflow_dir: Path) -> dict[str, "bd.Board"]:
    """The board profiles the config asks for, validated (built-in ones and `board_files`)."""
    if not names and not extra_files:
        return {}  # nothing to read or validate (importing jsonschema alone takes ~25 ms)
    import jsonschema

    schema = yaml.safe_load((workflow_dir / "workflow" / "schemas" / "board.schema.yaml").read_text())
    files = dict(bd.builtin_board_files(workflow_dir / "boards"))
    for i, extra in enumerate(extra_files):
        path = base / extra
        if not path.is_file():
            raise ConfigError(f"board_files[{i}]: {extra!r} does not exist (relative to {base.resolve()})")
        files[bd.load_board_file(path).get("name", path.stem)] = path
    boards = {}
    for i, name in enumerate(names):
        if name not in files:
            raise ConfigError(
                f"boards[{i}]: unknown board {name!r}; available: {', '.join(files)} (add your own with `board_files`)"
            )
        profile = bd.load_board_file(files[name])
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(profile))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "profile"
            raise ConfigError(f"board {name!r} ({files[name]}): {where}: {error.message}")
        board = bd.board_from_profile(profile, str(files[name]))
        if board.target not in tg.TARGETS:
            raise ConfigError(f"board {name!r} ({files[name]}): npu.target: unknown target {board.target!r}")
        ini = tg.read_vela_ini()
        for mode in board.memory_modes:
            reason = tg.invalid_combination_reason(board.target, board.system_config, mode, ini)
            if reason is not None:
                raise ConfigError(f"board {name!r} ({files[name]}): {reason}")
        boards[name] = board
    return boards


# The repository this package lives in (an editable install): its boards/ and schemas.
WORKFLOW_DIR = Path(__file__).resolve().parents[3]


def _numerics(numerics: dict) -> dict:
    if numerics.get("bundleio") and numerics.get("verify", True) is False:
        raise ConfigError(
            "numerics.bundleio: a BundleIO program's expected outputs come from the verify stage, which "
            "numerics.verify: false leaves out; turn one of them off"
        )
    return dict(numerics)


def _models(entries: list[dict], base: Path) -> dict[str, ModelSpec]:
    models: dict[str, ModelSpec] = {}
    for i, entry in enumerate(entries):
        where = f"models[{i}]"
        name = entry.get("name", "")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(
                f"{where}.name: {name!r} is not a valid model name; use letters, digits, '_' and '-', "
                "starting with a letter or digit (names become folder names under results/)"
            )
        if name in models:
            raise ConfigError(f"{where}.name: model name {name!r} is used twice; model names must be unique")
        dataset, train = entry.get("dataset"), entry.get("train")
        if train is not None and dataset in (None, "random"):
            raise ConfigError(
                f"{where} ({name}): `train` needs a `dataset` with labels to train on (for example `dataset: digits`)"
            )
        if isinstance(dataset, dict) and not (base / dataset["path"]).exists():
            raise ConfigError(
                f"{where}.dataset.path ({name}): {dataset['path']!r} does not exist (relative to {base.resolve()})"
            )
        extras = {
            "dataset": dataset,
            "train": train,
            "classifier": entry.get("classifier"),
            "reads": _model_reads(entry.get("reads", []), f"{where}.reads ({name})", base),
            "init": {k: v for k, v in (entry.get("init") or {}).items() if v not in ("keep", False)},
            "keep_on_cpu": tuple(dict(item) for item in entry.get("keep_on_cpu") or ()),
            "channels_last": bool(entry.get("channels_last")),
            "task": entry.get("task"),
        }
        models[name] = _model(entry, name, where, base, extras)
    return models


def _model(entry: dict, name: str, where: str, base: Path, extras: dict) -> ModelSpec:
    """A model file (ModelUnderTest, ModelInputs) or an import path with its inputs: exactly one."""
    has_file, has_import = "file" in entry, "import" in entry
    if has_file == has_import:
        raise ConfigError(
            f"{where} ({name}): give exactly one of `file` (a model file) or `import` (package.module:Callable)"
        )
    if has_file:
        if "inputs" in entry or entry.get("kwargs"):
            raise ConfigError(
                f"{where} ({name}): `inputs` and `kwargs` belong to `import` models; a model file defines "
                "ModelInputs itself"
            )
        if not (base / entry["file"]).is_file():
            raise ConfigError(
                f"{where}.file ({name}): model file {entry['file']!r} does not exist (relative to {base.resolve()})"
            )
        return ModelSpec(name=name, file=entry["file"], **extras)
    if not entry.get("inputs"):
        raise ConfigError(
            f"{where} ({name}): an `import` model needs `inputs` (a list of {{shape: [...]}}, one per "
            "forward() argument)"
        )
    inputs = tuple(
        InputSpec(tuple(spec["shape"]), spec.get("dtype", "float32"), *spec.get("range", [0.0, 1.0]))
        for spec in entry["inputs"]
    )
    return ModelSpec(
        name=name, import_path=entry["import"], kwargs=dict(entry.get("kwargs", {})), inputs=inputs, **extras
    )


def _model_reads(paths: list[str], where: str, base: Path) -> tuple[str, ...]:
    """The files a model's code reads, each an input of its export (a folder: every file in it)."""
    files = []
    for i, path in enumerate(paths):
        full = base / path
        if full.is_dir():
            files.extend(str(Path(path) / p.relative_to(full)) for p in sorted(full.rglob("*")) if p.is_file())
        elif full.is_file():
            files.append(path)
        else:
            raise ConfigError(
                f"{where}[{i}]: {path!r} does not exist (relative to {base.resolve()}); list the files the "
                "model's code reads, relative to the working directory"
            )
    return tuple(dict.fromkeys(files))


def _vela_options(entry: dict, inherited: VelaOptions | None, where: str, base: Path) -> VelaOptions:
    inherited = inherited or VelaOptions()
    options = VelaOptions(
        optimise=entry.get("optimise", inherited.optimise) or tg.VELA_DEFAULT_OPTIMISE,
        arena_cache_size=entry.get("arena_cache_size", inherited.arena_cache_size),
        config=entry.get("config", inherited.config),
        fallback=entry.get("fallback", inherited.fallback),
    )
    if options.config is not None and not (base / options.config).is_file():
        raise ConfigError(
            f"{where}.config: Vela configuration file {options.config!r} does not exist (relative to {base.resolve()})"
        )
    return options


def _vela_versions(entry: dict, inherited: tuple[str | None, ...], where: str) -> tuple[str | None, ...]:
    """The Vela versions of `versions:` (None stands for the installed one), or the inherited ones."""
    if entry.get("versions") is None:
        return inherited
    versions = [str(v) for v in entry["versions"]]
    for i, version in enumerate(versions):
        if not VERSION_RE.match(version):
            raise ConfigError(
                f"{where}.versions[{i}]: {version!r} is not a Vela release number (e.g. 5.2.0; "
                f"the installed one is {tg.installed_vela_version()})"
            )
    if len(set(versions)) != len(versions):
        raise ConfigError(f"{where}.versions: a Vela version is listed twice")
    installed = tg.installed_vela_version()
    return tuple(None if v == installed else v for v in versions)


def _ini(options: VelaOptions, base: Path) -> tg.VelaIni:
    return tg.read_vela_ini(None if options.config is None else str(base / options.config))


def _target_entries(
    entries: list,
    family_defaults: dict,
    global_vela: VelaOptions,
    base: Path,
    allow_empty: bool = False,
    global_versions: tuple[str | None, ...] = (None,),
) -> list[TargetEntry]:
    result: list[TargetEntry] = []
    for i, entry in enumerate(entries):
        where = f"targets[{i}]"
        spec = {"target": entry} if isinstance(entry, str) else dict(entry)
        target = spec["target"]
        if target not in tg.TARGETS:
            raise ConfigError(f"{where}: unknown target {target!r}; allowed: {', '.join(tg.TARGETS)}")
        fam = tg.family(target)
        system_config = spec.get("system_config") or family_defaults.get(fam) or tg.DEFAULT_SYSTEM_CONFIG[fam]
        vela = _vela_options(spec.get("vela", {}), global_vela, f"{where}.vela", base)
        ini = _ini(vela, base)
        reason = tg.system_config_reason(target, system_config, ini)
        if reason is not None:
            key = f"{where}.system_config" if spec.get("system_config") else f"system_configs.{fam}"
            raise ConfigError(f"{key}: {reason}")
        if any(e.target == target and e.system_config == system_config for e in result):
            raise ConfigError(f"{where}: {target} with system config {system_config} is listed twice")
        versions = _vela_versions(spec.get("vela", {}), global_versions, f"{where}.vela")
        result.append(TargetEntry(target, system_config, vela, ini, versions))
    if not result and not allow_empty:
        raise ConfigError(f"targets: the list is empty; allowed targets: {', '.join(tg.TARGETS)}")
    return result


def _memory_modes(modes: list[str] | str, entries: list[TargetEntry]) -> list[str]:
    inis = [e.ini for e in entries] or [tg.read_vela_ini()]
    known = list(dict.fromkeys(m for ini in inis for m in ini.memory_modes))
    if modes == "all":  # each target then keeps the modes Vela accepts for it (_combination_reason)
        return known
    for i, mode in enumerate(modes):
        if mode not in known:
            raise ConfigError(f"memory_modes[{i}]: unknown memory mode {mode!r}; allowed: {', '.join(sorted(known))}")
    if len(set(modes)) != len(modes):
        raise ConfigError("memory_modes: a memory mode is listed twice")
    return list(modes)


def _combination_reason(entry: TargetEntry, memory_mode: str) -> str | None:
    return tg.invalid_combination_reason(entry.target, entry.system_config, memory_mode, entry.ini)


def _matches(cell: Cell, selector: dict) -> bool:
    key_to_attr = {"quantization": "quant", "vela_version": "effective_vela_version"}
    return all(getattr(cell, key_to_attr.get(k, k)) == v for k, v in selector.items())


def _allowed_values(axes: _Axes) -> dict[str, Iterable[str]]:
    return {
        "model": list(axes.models),
        "quantization": list(axes.quantization),
        "target": list(dict.fromkeys(e.target for e in axes.entries)),
        "system_config": list(dict.fromkeys(e.system_config for e in axes.entries)),
        "memory_mode": list(axes.memory_modes),
        "vela_version": list(
            dict.fromkeys(v or tg.installed_vela_version() for e in axes.entries for v in e.vela_versions)
        ),
    }


def _check_selector(selector: dict, where: str, axes: _Axes) -> None:
    allowed = _allowed_values(axes)
    for key, value in selector.items():
        if value not in allowed[key]:
            raise ConfigError(f"{where}.{key}: {value!r} is not in the matrix; allowed: {', '.join(allowed[key])}")


def _included_cells(selector: dict, where: str, axes: _Axes) -> list[Cell]:
    model, target, mode = selector["model"], selector["target"], selector["memory_mode"]
    if model not in axes.models:
        raise ConfigError(f"{where}.model: unknown model {model!r}; allowed: {', '.join(axes.models)}")
    if target not in tg.TARGETS:
        raise ConfigError(f"{where}.target: unknown target {target!r}; allowed: {', '.join(tg.TARGETS)}")
    fam = tg.family(target)
    matching = [
        e
        for e in axes.entries
        if e.target == target and e.system_config == selector.get("system_config", e.system_config)
    ]
    system_config = (
        selector.get("system_config")
        or (matching[0].system_config if matching else None)
        or axes.system_configs.get(fam)
        or tg.DEFAULT_SYSTEM_CONFIG[fam]
    )
    vela = matching[0].vela if matching else axes.vela
    ini = matching[0].ini if matching else _ini(vela, axes.base)
    versions = matching[0].vela_versions if matching else axes.vela_versions
    if "vela_version" in selector:
        versions = _vela_versions({"versions": [selector["vela_version"]]}, versions, f"{where}")
    for key, reason in (
        ("system_config", tg.system_config_reason(target, system_config, ini)),
        ("memory_mode", tg.memory_mode_reason(target, system_config, mode, ini)),
    ):
        if reason is not None:
            raise ConfigError(f"{where}.{key}: {model} on {target} / {system_config} / {mode} is not valid: {reason}")
    quants = [selector["quantization"]] if "quantization" in selector else list(axes.quantization)
    for q in quants:
        if q not in QUANT_SCHEMES:
            raise ConfigError(f"{where}.quantization: unknown scheme {q!r}; allowed: {', '.join(QUANT_SCHEMES)}")
    return [Cell(model, q, target, system_config, mode, vela, version) for q in quants for version in versions]
