"""The package shows the pipeline: each stage's code closure holds only what it needs, no stage
imports another, one name per stage, and the tree is clean under ruff and snakefmt."""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from conftest import REPO, append, planned_jobs
from ethosweep.runtime import codeversion
from ethosweep.runtime.jobs import WARM_MODULES

RULES = sorted((REPO / "workflow" / "rules").glob("*.smk"))
SCRIPTS = REPO / "workflow" / "scripts"
PACKAGE = REPO / "src" / "ethosweep"


def rule_blocks() -> dict[str, str]:
    """rule name -> its text, from every rules file and the Snakefile."""
    blocks = {}
    for path in [REPO / "Snakefile", *RULES]:
        text = path.read_text()
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.S | re.M):
            blocks[match.group(1)] = match.group(2)
    return blocks


def rule_stages(body: str) -> list[str]:
    """The 'module:function' steps a rule names in `params.stage` (one, or several run in order)."""
    stage = re.search(r"^\s+stage=(.+),$", body, re.M)
    return re.findall(r'"([\w.]+:\w+)"', stage.group(1)) if stage else []


def stages() -> dict[str, tuple[list[str], list[str] | None]]:
    """rule -> (the library functions it runs, the modules the rule's code param hashes)."""
    found = {}
    for rule, body in rule_blocks().items():
        if not re.search(r'script:\s*\n\s*"\.\./scripts/stage\.py"', body):
            continue
        # model_code(...): code_version of the same modules, and of the ethosweep module that builds
        # an `import:` model (workflow/rules/common.smk)
        code = re.search(r"code=(?:code_version|model_code)\(([^)]*)\)", body)
        modules = re.findall(r'"([\w.]+)"', code.group(1)) if code else None
        found[rule] = (rule_stages(body), modules)
    return found


def signature(target: str) -> dict[str, bool]:
    """A stage function's parameters -> whether it has a default (read, not imported: no torch); a
    parameter that is a dataclass counts as its fields, as ethosweep.runtime.binding binds them."""
    module, _, function = target.partition(":")
    tree = ast.parse(codeversion.module_path(module).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    positional = node.args.args
    defaults = [False] * (len(positional) - len(node.args.defaults)) + [True] * len(node.args.defaults)
    arguments = list(zip(positional, defaults))
    arguments += [(a, d is not None) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)]
    found = {}
    for argument, has_default in arguments:
        fields = dataclass_fields(tree, argument.annotation)
        if fields is None:
            found[argument.arg] = has_default
        else:
            found |= {name: field_default or has_default for name, field_default in fields.items()}
    return found


def dataclass_fields(tree: ast.Module, annotation: ast.expr | None) -> dict[str, bool] | None:
    """The binding's names of the dataclass an annotation names (its `prefix` + each field) -> whether
    the field has a default; None if the annotation names no dataclass of this package."""
    name = annotation.id if isinstance(annotation, ast.Name) else None
    for statement in tree.body if name else []:
        if isinstance(statement, ast.ImportFrom) and name in {a.name for a in statement.names}:
            if not (statement.module or "").startswith("ethosweep."):
                return None
            return dataclass_fields(ast.parse(codeversion.module_path(statement.module).read_text()), annotation)
        decorated = isinstance(statement, ast.ClassDef) and statement.name == name and statement.decorator_list
        if decorated and "dataclass" in ast.unparse(statement.decorator_list[0]):
            fields, prefix = {}, ""
            for item in statement.body:
                if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                    continue
                if "ClassVar" in ast.unparse(item.annotation):
                    prefix = ast.literal_eval(item.value) if item.target.id == "prefix" else prefix
                    continue
                fields[item.target.id] = item.value is not None
            return {prefix + field: default for field, default in fields.items()}
    return None


def stage_modules() -> set[str]:
    return {target.partition(":")[0] for targets, _ in stages().values() for target in targets}


def defines(module: str, function: str) -> bool:
    tree = ast.parse(codeversion.module_path(module).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)


def imports_torch(module: str) -> bool:
    """Whether the module (anywhere in it, function-level imports included) imports torch or ExecuTorch."""
    return bool(top_level_imports(module) & {"torch", "executorch", "torchao"})


def top_level_imports(module: str) -> set[str]:
    """The top-level packages the module imports, anywhere in it (function-level imports included)."""
    tree = ast.parse(codeversion.module_path(module).read_text())
    found = set()
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found.update(n.split(".")[0] for n in names)
    return found


def test_every_rule_that_runs_code_has_a_code_param_naming_its_scripts_module():
    found = stages()
    assert len(found) >= 20
    for rule, (targets, code) in found.items():
        modules = [target.partition(":")[0] for target in targets]
        assert code is not None, f"rule {rule} has no code=code_version(...) param"
        assert code == modules, f"rule {rule}: it runs {modules}, its code param hashes {code}"
        for target in targets:
            module, _, function = target.partition(":")
            resolves = codeversion.module_path(module).exists() and defines(module, function)
            assert resolves, f"{rule}: {target} does not resolve"


def test_every_rule_gives_its_functions_every_parameter_once_by_name():
    """Every rule runs workflow/scripts/stage.py, and the job's items are bound to the function's
    parameters by name (ethosweep.runtime.binding): checked here for every rule, the firmware and
    FVP rules that never run on this machine included, as Snakemake itself parses the workflow."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    from ethosweep.runtime.binding import JOB_ONLY, SPREAD

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1), snakefile=REPO / "Snakefile", workdir=REPO
        )._workflow
        rules = {rule.name: rule for rule in workflow.rules if "stage" in rule.params.keys()}
    assert set(rules) == set(stages()) and len(rules) >= 20
    settings = {"dataset", "classifier", "seed", "evaluation_samples", "random_samples", "min_agreement"}
    for name, rule in rules.items():
        given: dict[str, int] = {}
        names = [*rule.input.keys(), *rule.output.keys(), "log", "threads"]
        names += [k for k in rule.params.keys() if k not in JOB_ONLY | {SPREAD}]
        names += sorted(settings) if SPREAD in rule.params.keys() else []
        for item in names:
            given[item] = given.get(item, 0) + 1
        for wildcard in rule.wildcard_names:  # a fallback: an item of the same name is preferred
            given.setdefault(wildcard, 1)
        for target in rule_stages(rule_blocks()[name]):
            for parameter, has_default in signature(target).items():
                assert given.get(parameter, 0) <= 1, f"{name} gives {parameter} twice to {target}"
                assert given.get(parameter) or has_default, f"{name} gives no {parameter}, which {target} needs"


def test_no_rule_lists_every_cell_when_the_workflow_is_parsed():
    """A job step on a cluster parses the workflow to run one cell: a rule that read every cell with
    its paths written out at parse time cost it 2.5 of its 3.1 s at the deployed zoo's 6,000 cells
    (docs/clusters.md). Such rules take every_cell_path / every_cell_record, functions Snakemake calls
    only when it plans their job."""
    blocks = rule_blocks()
    assert {"all", "summarize_sweep", "report_cells", "map_operators"} <= set(blocks)
    eager = re.compile(r"(?<![\w.])(cell_paths|board_cell_paths|all_outputs)\(|for \w+ in SWEEP\.cells\b")
    listing = {rule: eager.search(text)[0] for rule, text in blocks.items() if eager.search(text)}
    assert not listing, f"rules that list every cell at parse time: {listing}"


def test_binding_takes_lists_optional_files_and_settings_by_name():
    from ethosweep.runtime.binding import BindingError, bind

    def stage(summary: str, pte: list[str], weights: str | None = None, seed: int = 0, **settings):
        return None

    job = {
        "input": {"pte": "a.pte", "weights": [], "model_file": "m.py"},
        "output": {"summary": "s.csv"},
        "params": {"stage": "x:y", "settings": {"seed": 3, "min_cosine": 0.9}},
        "wildcards": {"model": "mnist"},
        "log": "l.log",
        "threads": 1,
    }
    assert bind(stage, job) == {"summary": "s.csv", "pte": ["a.pte"], "weights": None, "seed": 3, "min_cosine": 0.9}
    with pytest.raises(BindingError, match="gives input.summary and output.summary"):
        bind(stage, {**job, "input": {**job["input"], "summary": "x"}}, "rule r")
    with pytest.raises(BindingError, match="gives no summary, which stage\\(\\) needs"):
        bind(stage, {**job, "output": {}}, "rule r")


@dataclasses.dataclass(frozen=True)
class Files:
    summary: str
    pte: list[str]
    weights: str | None = None


@dataclasses.dataclass(frozen=True)
class Other:
    prefix: typing.ClassVar[str] = "same_as_"
    report: str | None = None


def test_binding_builds_a_dataclass_from_the_items_named_as_its_fields():
    from ethosweep.runtime.binding import BindingError, bind

    def stage(files: Files, other: Other = Other(), seed: int = 0):
        return None

    job = {
        "input": {"pte": "a.pte", "weights": [], "same_as_report": "u55.json"},
        "output": {"summary": "s.csv"},
        "params": {"settings": {"seed": 3}},
    }
    assert bind(stage, job) == {"files": Files("s.csv", ["a.pte"], None), "other": Other("u55.json"), "seed": 3}
    alone = {**job, "input": {"pte": "a.pte"}}
    assert bind(stage, alone) == {"files": Files("s.csv", ["a.pte"], None), "seed": 3}  # other: its default
    with pytest.raises(BindingError, match="gives no summary, which stage\\(\\) needs"):
        bind(stage, {**job, "output": {}}, "rule r")


def test_the_warm_worker_serves_exactly_the_stages_that_import_torch():
    heavy = {m for m in stage_modules() if any(imports_torch(x) for x in codeversion.closure(m))}
    assert set(WARM_MODULES) == heavy


def test_the_report_stages_run_in_a_serving_worker_that_imported_their_libraries():
    """WARM_IF_SERVING: torch-free stages a worker already up runs without importing matplotlib or
    jinja2 again, because its server imported them."""
    from ethosweep.runtime.jobs import WARM_IF_SERVING
    from ethosweep.runtime.worker import PRELOAD

    for module in WARM_IF_SERVING:
        closure = codeversion.closure(module)
        assert module in stage_modules() and not any(imports_torch(x) for x in closure), module
        libraries = set().union(*(top_level_imports(x) for x in closure)) & {"matplotlib", "jinja2"}
        assert libraries, f"{module} imports neither matplotlib nor jinja2: nothing to gain in a worker"
        assert libraries <= {name.split(".")[0] for name in PRELOAD}, module


def test_no_stage_imports_another_stage():
    modules = stage_modules()
    for module in modules:
        others = set(codeversion.closure(module)) & (modules - {module})
        assert not others, f"{module} imports the stage module(s) {sorted(others)}"


def test_closures_hold_what_each_stage_needs_and_no_more():
    closure = {m.removeprefix("ethosweep."): set(codeversion.closure(m)) for m in stage_modules()}
    # model loading depends on the model's spec, not on the matrix, the boards or the targets
    for stage in ("compile.export", "zoo.train"):
        assert not {"ethosweep.matrix.expand", "ethosweep.matrix.boards", "ethosweep.matrix.targets"} & closure[stage]
    # only the stages that place a cell on a board read the boards module
    on_boards = {m for m, c in closure.items() if "ethosweep.matrix.boards" in c}
    assert on_boards == {"deploy.deploy", "results.summary", "results.report.cells"}
    # nothing at run time expands the matrix: the Snakefile does, at parse time
    assert not [m for m, c in closure.items() if "ethosweep.matrix.expand" in c]
    # the job machinery is below every stage: editing it reruns nothing
    assert not [m for m, c in closure.items() if {"ethosweep.runtime.jobs", "ethosweep.runtime.worker"} & c]


def test_the_package_has_no_import_cycle_and_empty_subpackage_inits():
    modules = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules.append(".".join(parts))
        if rel.name == "__init__" and len(rel.parts) > 2:
            assert path.read_text() == "", f"{path}: subpackage __init__ files stay empty (no re-exports)"
    graph = {m: codeversion.package_imports(m) for m in modules}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in graph.get(module, ()):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*path, module, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, module])
        state[module] = 2

    for module in modules:
        if module not in state:
            visit(module, [])


def test_editing_a_board_definition_reruns_only_what_places_cells_on_boards(sweep_copy):
    package = sweep_copy / "pkg"
    shutil.copytree(PACKAGE, package / "ethosweep", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": str(package)}
    assert planned_jobs(sweep_copy, env=env) == {}
    append(package / "ethosweep" / "matrix" / "boards.py", "\n# an edit to the boards module\n")
    assert planned_jobs(sweep_copy, env=env) == {
        "bundle_deployment": 8,  # 4 U55 cells on 2 boards
        "summarize_sweep": 1,
        "report_cells": 1,
        "report_plots": 1,
        "report_index": 1,
        "all": 1,
    }


@pytest.mark.parametrize(
    "command",
    [
        # --no-cache: nothing written into the checkout, which another test checks while it runs
        ["ruff", "check", "--no-cache", "."],
        ["ruff", "format", "--check", "--no-cache", "."],
        ["snakefmt", "--check", "."],
    ],
    ids=["ruff-check", "ruff-format", "snakefmt"],
)
def test_the_tree_is_clean_under_the_linters(command):
    tool = Path(sys.executable).parent / command[0]
    proc = subprocess.run([str(tool), *command[1:]], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "perf").glob("*.py")))
def test_the_benchmarks_import_what_exists(script):
    """The benchmarks are run by hand (they take minutes): every ethosweep name they import, at the
    top or inside a function, must exist, and their command line must parse."""
    import importlib

    text = (REPO / "perf" / script).read_text()
    for module, names in re.findall(r"from (ethosweep[\w.]*) import ([\w, ]+)", text):
        imported = importlib.import_module(module)
        for name in (n.strip().split(" as ")[0] for n in names.split(",") if n.strip()):
            assert hasattr(imported, name) or codeversion.module_path(f"{module}.{name}").exists(), (
                f"perf/{script}: {module} has no {name}"
            )
    proc = subprocess.run([sys.executable, str(REPO / "perf" / script), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_no_file_over_500_lines_and_no_function_over_60_lines_or_8_parameters():
    """A file that long holds more than one concept, a function that long does more than one thing,
    and one with more parameters mirrors a rule's items instead of taking values (binding)."""
    import ast

    files = [*(REPO / "src").rglob("*.py"), *(REPO / "workflow").rglob("*.py"), *(REPO / "workflow").rglob("*.smk")]
    assert [str(p) for p in files if len(p.read_text().splitlines()) > 500] == []
    long = []
    for path in (REPO / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                count = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
                if node.end_lineno - node.lineno >= 60 or count > 8:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert long == []


@pytest.fixture(scope="module")
def module_value():
    return object()


def test_tests_of_a_module_fixture_are_grouped_on_one_worker(request, module_value, worker_id):
    """A module fixture (a sweep of broken models, a SLURM cluster) is made once per worker that runs
    one of its tests: its tests carry the module's xdist group, so one worker runs them all."""
    if worker_id == "master":
        pytest.skip("runs under pytest-xdist (the README's `uv run pytest` starts two workers)")
    assert request.node.nodeid.endswith("@test_layout"), request.node.nodeid
