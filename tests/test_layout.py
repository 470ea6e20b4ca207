"""The package shows the pipeline: each stage's code closure holds only what it needs, no stage
imports another, one name per stage, and the tree is clean under ruff and snakefmt."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, planned_jobs
from ethosweep.runtime import codeversion
from ethosweep.runtime.jobs import WARM_MODULES

RULES = sorted((REPO / "workflow" / "rules").glob("*.smk"))
SCRIPTS = REPO / "workflow" / "scripts"
PACKAGE = REPO / "src" / "ethosweep"


def rule_blocks() -> dict[str, str]:
    """rule name -> its text, from every rules file."""
    blocks = {}
    for path in RULES:
        text = path.read_text()
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.S | re.M):
            blocks[match.group(1)] = match.group(2)
    return blocks


def script_targets(script: str) -> list[str]:
    """The 'module:function' steps a workflow script hands to run_stage (one) or run_stages (in order)."""
    tree = ast.parse((SCRIPTS / script).read_text())
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("run_stage", "run_stages")
    ]
    assert len(calls) == 1, f"{script}: one run_stage or run_stages call expected"
    (call,) = calls
    if call.func.id == "run_stage":
        return [call.args[1].value]
    return [step.elts[0].value for step in call.args[1:]]


def stages() -> dict[str, tuple[list[str], list[str] | None]]:
    """rule -> (the script's run_stage targets, the modules the rule's code param hashes)."""
    found = {}
    for rule, body in rule_blocks().items():
        script = re.search(r'script:\s*\n\s*"\.\./scripts/(\w+\.py)"', body)
        if script is None:
            continue
        code = re.search(r"code=code_version\(([^)]*)\)", body)
        modules = re.findall(r'"([\w.]+)"', code.group(1)) if code else None
        found[rule] = (script_targets(script.group(1)), modules)
    return found


def stage_modules() -> set[str]:
    return {target.partition(":")[0] for targets, _ in stages().values() for target in targets}


def defines(module: str, function: str) -> bool:
    tree = ast.parse(codeversion.module_path(module).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)


def imports_torch(module: str) -> bool:
    """Whether the module (anywhere in it, function-level imports included) imports torch or ExecuTorch."""
    tree = ast.parse(codeversion.module_path(module).read_text())
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n.split(".")[0] in ("torch", "executorch", "torchao") for n in names):
            return True
    return False


def test_every_rule_that_runs_code_has_a_code_param_naming_its_scripts_module():
    found = stages()
    assert len(found) >= 20
    for rule, (targets, code) in found.items():
        modules = [target.partition(":")[0] for target in targets]
        assert code is not None, f"rule {rule} has no code=code_version(...) param"
        assert code == modules, f"rule {rule}: its script runs {modules}, its code param hashes {code}"
        for target in targets:
            module, _, function = target.partition(":")
            resolves = codeversion.module_path(module).exists() and defines(module, function)
            assert resolves, f"{rule}: {target} does not resolve"


def test_the_warm_worker_serves_exactly_the_stages_that_import_torch():
    heavy = {m for m in stage_modules() if any(imports_torch(x) for x in codeversion.closure(m))}
    assert set(WARM_MODULES) == heavy


def test_no_stage_imports_another_stage():
    modules = stage_modules()
    for module in modules:
        others = set(codeversion.closure(module)) & (modules - {module})
        assert not others, f"{module} imports the stage module(s) {sorted(others)}"


def test_closures_hold_what_each_stage_needs_and_no_more():
    closure = {m.removeprefix("ethosweep."): set(codeversion.closure(m)) for m in stage_modules()}
    # model loading depends on the model's spec, not on the matrix, the boards or the targets
    for stage in ("compile.export", "compile.train"):
        assert not {"ethosweep.matrix.config", "ethosweep.matrix.boards", "ethosweep.matrix.targets"} & closure[stage]
    # only the stages that place a cell on a board read the boards module
    on_boards = {m for m, c in closure.items() if "ethosweep.matrix.boards" in c}
    assert on_boards == {"deploy.deploy", "results.summary", "results.report"}
    # nothing at run time expands the matrix: the Snakefile does, at parse time
    assert not [m for m, c in closure.items() if "ethosweep.matrix.config" in c]
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
    with open(package / "ethosweep" / "matrix" / "boards.py", "a") as f:
        f.write("\n# an edit to the boards module\n")
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
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["snakefmt", "--check", "."],
    ],
    ids=["ruff-check", "ruff-format", "snakefmt"],
)
def test_the_tree_is_clean_under_the_linters(command):
    tool = Path(sys.executable).parent / command[0]
    proc = subprocess.run([str(tool), *command[1:]], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "benchmarks").glob("*.py")))
def test_the_benchmarks_import_what_exists(script):
    """The benchmarks are run by hand (they take minutes): every ethosweep name they import, at the
    top or inside a function, must exist, and their command line must parse."""
    import importlib

    text = (REPO / "benchmarks" / script).read_text()
    for module, names in re.findall(r"from (ethosweep[\w.]*) import ([\w, ]+)", text):
        imported = importlib.import_module(module)
        for name in (n.strip().split(" as ")[0] for n in names.split(",") if n.strip()):
            assert hasattr(imported, name) or codeversion.module_path(f"{module}.{name}").exists(), (
                f"benchmarks/{script}: {module} has no {name}"
            )
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
