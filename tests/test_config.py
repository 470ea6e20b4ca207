"""The config schema and the matrix it expands to."""

import dataclasses
import importlib.metadata
import re
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from ethosweep.matrix.expand import ConfigError, build_sweep

REPO = Path(__file__).resolve().parents[1]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
ADD = {
    "name": "add",
    "import": "executorch.examples.models.toy_model:AddModule",
    "inputs": [{"shape": [4]}, {"shape": [4]}],
}


def sweep(config: dict, base: Path = REPO):
    validate(config, SCHEMA)
    return build_sweep(config, base)


def test_cells_of_gives_the_cells_with_those_fields_in_matrix_order_after_the_matrix_grows():
    result = sweep(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    wanted = {"model": "mnist", "quant": "int8", "tosa_profile": "u55"}
    scanned = [c for c in result.cells if all(getattr(c, k) == v for k, v in wanted.items())]
    assert result.cells_of(**wanted) == scanned and len(scanned) == 6  # U55 x 2 + U65 x 3 + the board's
    assert result.cells_of(target="ethos-u85-256", memory_mode="Sram_Only") == [
        c for c in result.cells if (c.target, c.memory_mode) == ("ethos-u85-256", "Sram_Only")
    ]
    assert result.cells_of(model="no such model") == []
    result.cells.append(dataclasses.replace(scanned[0], memory_mode="Sram_Only_again"))
    assert result.cells_of(**wanted) == [*scanned, result.cells[-1]]  # the index follows the matrix


def test_default_config_is_the_documented_matrix():
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    result = sweep(config)
    assert list(result.models) == [
        "add",
        "softmax",
        "mnist",
        "mnist_digits",
        "mobilenet_v2",
        "ds_cnn",
        "resnet8",
        "mobilenet_v1_025",
        "deep_autoencoder",
    ]
    # per model: U55 x {Shared_Sram, Sram_Only} + U65 and U85 x {Shared_Sram, Sram_Only, Dedicated_Sram},
    # + the i.MX 93 board's U65 / Dedicated_Sram_384KB (the other boards' cells are in the cross product)
    assert len(result.cells) == 9 * (2 + 3 + 3 + 1)
    assert list(result.boards) == ["alif-e8", "imx93", "corstone-300", "corstone-320"]
    assert len(result.board_cells()) == 9 * (1 + 1 + 2 + 2)
    assert {(c.target, c.system_config) for c in result.cells} == {
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded"),
        ("ethos-u65-256", "Ethos_U65_High_End"),
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid"),
    }
    assert not [c for c in result.cells if c.target == "ethos-u55-128" and c.memory_mode == "Dedicated_Sram"]
    assert result.skipped == [
        (
            "ethos-u55-128 x Ethos_U55_High_End_Embedded x Dedicated_Sram",
            "ethos-u55 has no dedicated SRAM, so Dedicated_Sram is not available on ethos-u55-128",
        ),
    ]
    # 9 models x 2 TOSA profiles: U55 and U65 cells share quantized programs.
    assert len(result.quantize_keys()) == 18
    assert result.describe().startswith(
        "ethosweep: 81 cells (9 models, 3 targets, 4 memory modes, 1 quantization scheme); 9 of them for the NPU "
        "configuration or memory mode of a board (imx93: `boards`); left out 1 combination Vela does not accept"
    )
    assert result.models["mnist_digits"].dataset == "digits" and result.models["mnist_digits"].train["epochs"] == 12
    # what config/README.md says of it: cross product, board cells, summary rows (a cell per board it is on)
    cross = len(
        [c for c in result.cells if c.id not in {cell.id for board, cell in result.board_cells() if board == "imx93"}]
    )
    rows = sum(max(1, len(result.cell_boards.get(c.id, []))) for c in result.cells)
    readme = " ".join((REPO / "config" / "README.md").read_text().split())
    assert (
        f"Dedicated_Sram: {cross} cells, and the i.MX93 board adds its Ethos-U65 / Dedicated_Sram_384KB cell per "
        f"model: {len(result.cells)} cells in all ({rows} summary rows"
    ) in readme


def test_schema_fills_defaults():
    config = {"models": [ADD]}
    validate(config, SCHEMA)
    assert config["targets"] == ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"]
    assert config["vela"] == {
        "optimise": "Performance",
        "arena_cache_size": None,
        "config": None,
        "fallback": True,
        "versions": None,
    }
    assert config["quantization"] == ["int8"] and config["seed"] == 0


def test_a_start_takes_the_last_starts_validation_of_the_same_config_and_schema(tmp_path):
    """validate_once: Snakemake's validate (defaults filled in) once per config, schema and packages
    in a working directory; the next start with the same ones takes its result."""
    import copy
    import shutil

    from ethosweep.matrix.config_file import validate_once

    checked = []

    def check(config):
        checked.append(dict(config))
        validate(config, schema)

    schema, memo = tmp_path / "schema.yaml", tmp_path / ".snakemake" / "ethosweep-config.json"
    shutil.copy(SCHEMA, schema)
    first, again = ({"models": [copy.deepcopy(ADD)]} for _ in range(2))  # validate fills in the model too
    validate_once(first, schema, check, memo)
    validate_once(again, schema, check, memo)
    assert len(checked) == 1 and again == first and again["vela"]["optimise"] == "Performance"
    validate_once({"models": [copy.deepcopy(ADD)], "seed": 3}, schema, check, memo)  # another config: checked
    schema.write_text(schema.read_text() + "\n")  # the same config, another schema: checked
    validate_once({"models": [copy.deepcopy(ADD)], "seed": 3}, schema, check, memo)
    assert len(checked) == 3
    with pytest.raises(WorkflowError):  # an invalid config is never remembered
        validate_once({"models": [copy.deepcopy(ADD)], "seed": "x"}, schema, check, memo)
    with pytest.raises(WorkflowError):
        validate_once({"models": [copy.deepcopy(ADD)], "seed": "x"}, schema, check, memo)


def test_per_target_vela_options_override_only_the_keys_they_set():
    config = {
        "models": [ADD],
        "targets": ["ethos-u55-128", {"target": "ethos-u85-256", "vela": {"optimise": "Size"}}],
        "memory_modes": ["Shared_Sram"],
        "vela": {"arena_cache_size": 65536},
    }
    cells = {c.target: c for c in sweep(config).cells}
    assert cells["ethos-u55-128"].vela.as_params() == {
        "optimise": "Performance",
        "arena_cache_size": 65536,
        "config": None,
    }
    assert cells["ethos-u85-256"].vela.as_params() == {"optimise": "Size", "arena_cache_size": 65536, "config": None}


def test_include_adds_cells_and_exclude_drops_them():
    config = {
        "models": [ADD, {"name": "mnist", "file": "models/mnist.py"}],
        "targets": ["ethos-u55-128"],
        "memory_modes": ["Shared_Sram"],
        "quantization": ["int8", "a16w8"],
        "exclude": [{"model": "mnist", "quantization": "a16w8"}],
        "include": [
            {"model": "mnist", "target": "ethos-u85-256", "memory_mode": "Dedicated_Sram", "quantization": "int8"}
        ],
    }
    ids = [c.id for c in sweep(config).cells]
    assert ids == [
        "add/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram",
        "add/a16w8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram",
        "mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram",
        "mnist/int8/ethos-u85-256/Ethos_U85_SYS_DRAM_Mid/Dedicated_Sram",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"include": [{"model": "add", "target": "ethos-u55-128", "memory_mode": "Dedicated_Sram"}]},
            "include[0].memory_mode: add on ethos-u55-128 / Ethos_U55_High_End_Embedded / Dedicated_Sram is not valid: "
            "ethos-u55 has no dedicated SRAM",
        ),
        (
            {
                "include": [
                    {
                        "model": "add",
                        "target": "ethos-u65-256",
                        "system_config": "Ethos_U65_Embedded",
                        "memory_mode": "Dedicated_Sram",
                    }
                ]
            },
            "include[0].memory_mode: add on ethos-u65-256 / Ethos_U65_Embedded / Dedicated_Sram is not valid: "
            "Dedicated_Sram puts the arena on AXI1, which is OffChipFlash",
        ),
        ({"targets": ["ethos-u99-1"]}, "targets[0]: unknown target 'ethos-u99-1'; allowed: ethos-u55-32, "),
        (
            {"targets": [{"target": "ethos-u55-128", "system_config": "Ethos_U85_SYS_DRAM_Mid"}]},
            "targets[0].system_config: system config 'Ethos_U85_SYS_DRAM_Mid' is for another NPU family than "
            "ethos-u55-128; allowed for ethos-u55: Ethos_U55_Deep_Embedded, Ethos_U55_High_End_Embedded",
        ),
        (
            {"system_configs": {"ethos-u65": "Nope"}},
            "system_configs.ethos-u65: system config 'Nope' is not defined in Arm/vela.ini",
        ),
        (
            {"targets": ["ethos-u55-128", "ethos-u55-128"]},
            "targets[1]: ethos-u55-128 with system config Ethos_U55_High_End_Embedded is listed twice",
        ),
        (
            {"memory_modes": ["Shared_SRAM"]},
            "memory_modes[0]: unknown memory mode 'Shared_SRAM'; allowed: Dedicated_Sram,",
        ),
        ({"exclude": [{"model": "mnist"}]}, "exclude[0].model: 'mnist' is not in the matrix; allowed: add"),
        ({"targets": ["ethos-u55-64"], "memory_modes": ["Dedicated_Sram"]}, "the matrix is empty"),
        (
            {"vela": {"config": "nowhere/vela.ini"}},
            "vela.config: Vela configuration file 'nowhere/vela.ini' does not exist",
        ),
        ({"models": [ADD, ADD]}, "models[1].name: model name 'add' is used twice"),
        (
            {"models": [{"name": "x", "file": "models/missing.py"}]},
            "models[0].file (x): model file 'models/missing.py' does not exist",
        ),
        ({"models": [{"name": "x"}]}, "models[0] (x): give exactly one of `file` (a model file) or `import`"),
        ({"models": [{"name": "x", "import": "a.b:C"}]}, "models[0] (x): an `import` model needs `inputs`"),
    ],
)
def test_invalid_configs_name_the_key_the_value_and_what_is_allowed(change, message):
    config = {"models": [ADD], "targets": ["ethos-u55-128", "ethos-u65-256"], "memory_modes": ["Shared_Sram"], **change}
    with pytest.raises(ConfigError) as error:
        sweep(config)
    assert message in str(error.value)


@pytest.mark.parametrize("name", ["../x", "a b", "", "x/y", ".hidden"])
def test_unsafe_model_names_are_rejected_by_the_schema_and_the_library(name):
    config = {"models": [{**ADD, "name": name}]}
    with pytest.raises(WorkflowError, match="does not match"):
        validate(dict(config), SCHEMA)
    with pytest.raises(ConfigError, match="is not a valid model name"):
        build_sweep(config, REPO)


def test_unknown_keys_are_rejected_by_the_schema():
    with pytest.raises(WorkflowError, match="Additional properties are not allowed .'modles' was unexpected"):
        validate({"models": [ADD], "modles": []}, SCHEMA)


def test_vela_versions_sweep_each_cell_with_each_version_and_keep_the_installed_ones_paths():
    installed = importlib.metadata.version("ethos-u-vela")
    config = {
        "models": [ADD],
        "targets": ["ethos-u55-128", {"target": "ethos-u85-256", "vela": {"versions": ["5.2.0"]}}],
        "memory_modes": ["Shared_Sram"],
        "vela": {"versions": [installed, "5.2.0"]},
        "exclude": [{"target": "ethos-u55-128", "vela_version": "5.2.0"}],
    }
    cells = sweep(config).cells
    assert [(c.target, c.effective_vela_version, c.id.rsplit("/", 1)[1]) for c in cells] == [
        # the installed Vela's cell keeps its path whether or not other versions are swept
        ("ethos-u55-128", installed, "Shared_Sram"),
        # a per-target list replaces the global one
        ("ethos-u85-256", "5.2.0", "Shared_Sram@vela-5.2.0"),
    ]
    assert "2 Vela versions" in sweep(config).describe()
    assert sweep({**config, "vela": {}, "exclude": []}).cells[0].vela_version is None


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        (["5.2.0", "5.2.0"], "vela.versions: a Vela version is listed twice"),
        (["latest"], "vela.versions[0]: 'latest' is not a Vela release number"),
    ],
)
def test_a_bad_vela_version_list_names_the_key(versions, message):
    config = {"models": [ADD], "targets": ["ethos-u55-128"], "memory_modes": ["Shared_Sram"], "vela": {}}
    config["vela"]["versions"] = versions
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_sweep(config, REPO)  # the schema also rejects 'latest' (its pattern); this is the one-line check


def test_a_models_declared_files_are_resolved_and_checked(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "a.pt").write_bytes(b"x")
    (tmp_path / "weights" / "b.pt").write_bytes(b"y")
    (tmp_path / "labels.txt").write_text("cat\n")
    model = {**ADD, "reads": ["labels.txt", "weights"]}
    result = build_sweep({"models": [model], "targets": ["ethos-u55-128"], "memory_modes": ["Shared_Sram"]}, tmp_path)
    assert result.models["add"].reads == ("labels.txt", "weights/a.pt", "weights/b.pt")
    with pytest.raises(ConfigError, match=r"models\[0\]\.reads \(add\)\[0\]: 'missing.pt' does not exist"):
        build_sweep({"models": [{**ADD, "reads": ["missing.pt"]}], "targets": ["ethos-u55-128"]}, tmp_path)


def schema_keys(schema: dict) -> list[tuple[str, object]]:
    """Every key the config schema defines, as config/README.md writes it (`models[].inputs[].shape`,
    `numerics.min_agreement`), in the schema's order, with its default (None where it has none)."""
    definitions = {f"#/definitions/{name}": node for name, node in schema["definitions"].items()}

    def resolved(node: dict) -> dict:
        while "$ref" in node:
            ref = node["$ref"]
            target = definitions.get(ref) or _follow(schema, ref)
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    keys = []

    def walk(node: dict, path: str) -> None:
        node = resolved(node)
        for part in node.get("allOf", []):
            walk(part, path)
        items = node.get("items")
        if node.get("type") == "array" and isinstance(items, dict):
            for choice in resolved(items).get("anyOf", [items]):
                walk(choice, f"{path}[]")
        for name, child in (node.get("properties") or {}).items():
            key = f"{path}.{name}" if path else name
            keys.append((key, resolved(child).get("default")))
            walk(child, key)

    walk(schema, "")
    return keys


def _follow(schema: dict, ref: str) -> dict:
    node = schema
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_config_readme_names_every_key_of_the_schema_in_its_order_with_its_default():
    schema = yaml.safe_load(Path(SCHEMA).read_text())
    keys = schema_keys(schema)
    assert ("numerics.min_agreement", 0.99) in keys and ("models[].inputs[].shape", None) in keys
    rows = {}  # key -> (position, default column)
    text = (REPO / "config" / "README.md").read_text()
    for position, match in enumerate(re.finditer(r"^\| `([^`]+)` \| ([^|]*) \|", text, re.M)):
        rows.setdefault(match.group(1), (position, match.group(2).strip()))
    missing = [key for key, _ in keys if key not in rows]
    assert not missing, f"config/README.md has no row for {missing}"
    positions = [rows[key][0] for key, _ in keys]
    assert positions == sorted(positions), "config/README.md lists the keys in another order than the schema"
    for key, default in keys:
        if default is None or key.startswith("targets[].vela."):  # no default, or the global `vela`'s
            continue
        shown = yaml.safe_load(rows[key][1].split("(")[0].strip().strip("`")) if rows[key][1] != "—" else None
        assert shown == default, f"config/README.md: {key} defaults to {default!r}, not {rows[key][1]}"


def test_the_deployed_zoo_is_its_presets_models_over_the_whole_configuration_space():
    """config/zoos/deployed.yaml defines no model: each comes once from the preset that defines it,
    with that preset's task (or its own), and the sweep crosses every target and memory mode Vela
    accepts in both schemes."""
    from ethosweep.matrix.config_file import resolve_models

    config = resolve_models(yaml.safe_load((REPO / "config" / "zoos" / "deployed.yaml").read_text()), REPO)
    result = sweep(config)
    parts = [
        entry["from"] for entry in yaml.safe_load((REPO / "config" / "zoos" / "deployed.yaml").read_text())["models"]
    ]
    defined = [m["name"] for part in parts for m in yaml.safe_load((REPO / part).read_text())["models"]]
    assert list(result.models) == defined and len(set(defined)) == len(defined) >= 50
    assert result.models["yolov8n"].task == "detection" and result.models["yolov8n_seg"].task == "segmentation"
    assert (
        result.models["mobilenet_v2"].task == "classification" and result.models["kws_gru"].task == "keyword spotting"
    )
    # 11 targets: Ethos-U55 (4) with 2 memory modes, Ethos-U65 (2) and Ethos-U85 (5) with all 6
    assert len(result.cells) == len(defined) * 2 * (4 * 2 + 7 * 6) >= 6000
    assert {c.target for c in result.cells} == set(__import__("ethosweep.matrix.targets").matrix.targets.TARGETS)


def test_a_zoo_runs_task_by_task_and_names_the_tasks_it_has(tmp_path):
    from ethosweep.matrix.config_file import resolve_models

    (tmp_path / "part.yaml").write_text(
        yaml.safe_dump({"task": "detection", "models": [ADD, {**ADD, "name": "b", "task": "pose"}]})
    )
    config = {"models": [{"from": "part.yaml"}, {**ADD, "name": "c"}], "task": "speech"}
    resolved = resolve_models(config, tmp_path)
    assert [(m["name"], m["task"]) for m in resolved["models"]] == [
        ("add", "detection"),
        ("b", "pose"),
        ("c", "speech"),
    ]
    assert [m["name"] for m in resolve_models({**config, "tasks": ["pose", "speech"]}, tmp_path)["models"]] == [
        "b",
        "c",
    ]
    with pytest.raises(ValueError, match="tasks: no model of task 'segmentation'; tasks here: detection, pose, speech"):
        resolve_models({**config, "tasks": ["segmentation"]}, tmp_path)
    with pytest.raises(ValueError, match=r"models\[0\]: only not allowed beside `from`"):
        resolve_models({"models": [{"from": "part.yaml", "only": ["b"]}]}, tmp_path)
    with pytest.raises(ValueError, match=r"models\[0\].from: cannot read 'nowhere.yaml'"):
        resolve_models({"models": [{"from": "nowhere.yaml"}]}, tmp_path)
