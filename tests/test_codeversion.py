"""Library edits must rerun exactly the stages whose code changed."""

import shutil
from pathlib import Path

from conftest import append
from ethosweep.runtime import codeversion

STAGES = {
    "export": "ethosweep.compile.export",
    "lower": "ethosweep.compile.lower",
    "vela": "ethosweep.vela.compile",
    "header": "ethosweep.deploy.header",
    "summary": "ethosweep.results.summary",
}


def test_each_stage_hashes_its_own_module_and_what_it_imports():
    assert "ethosweep.compile.compile_spec" in codeversion.closure("ethosweep.compile.lower")
    assert "ethosweep.compile.compile_spec" in codeversion.closure("ethosweep.vela.compile")
    # The lowering does not run Vela, and a cell's Vela run does not lower: neither reruns the other.
    assert "ethosweep.vela.compile" not in codeversion.closure("ethosweep.compile.lower")
    assert "ethosweep.compile.lower" not in codeversion.closure("ethosweep.vela.compile")
    assert set(codeversion.closure("ethosweep.deploy.header")) == {
        "ethosweep.deploy.header",
        "ethosweep.deploy.c_array",
        "ethosweep.runtime.integrity",
        "ethosweep.runtime.errors",
        "ethosweep.runtime.io",
    }
    # The job runner is not part of any stage: editing it reruns nothing.
    assert not [m for m in STAGES.values() if "ethosweep.runtime.jobs" in codeversion.closure(m)]


def test_editing_a_module_changes_the_version_of_the_stages_that_use_it(tmp_path, monkeypatch):
    package = tmp_path / "ethosweep"
    shutil.copytree(Path(codeversion.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codeversion, "PACKAGE_DIR", package)
    codeversion.closure.cache_clear()
    before = {stage: codeversion.code_version(module) for stage, module in STAGES.items()}

    append(package / "deploy" / "header.py", "\n# an edit\n")
    after = {stage: codeversion.code_version(module) for stage, module in STAGES.items()}

    assert after["header"] != before["header"]
    assert {s for s in before if before[s] == after[s]} == {"export", "lower", "vela", "summary"}
    codeversion.closure.cache_clear()


def test_editing_a_report_template_changes_the_version_of_the_report_jobs_only(tmp_path, monkeypatch):
    """The report's Jinja2 templates and stylesheet are package data its jobs read: part of their
    code version (codeversion.data_files), so a template edit rewrites the report and nothing else."""
    package = tmp_path / "ethosweep"
    shutil.copytree(Path(codeversion.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codeversion, "PACKAGE_DIR", package)
    codeversion.closure.cache_clear()
    report = {f"report.{m}": f"ethosweep.results.report.{m}" for m in ("cells", "index", "plots")}
    stages = {**STAGES, **report}
    before = {stage: codeversion.code_version(module) for stage, module in stages.items()}

    append(package / "results" / "report" / "templates" / "report.css", "\n/* an edit */\n")
    after = {stage: codeversion.code_version(module) for stage, module in stages.items()}

    # the report's jobs (the plots' too: its module sits beside the templates), and no other stage
    assert {s for s in stages if before[s] != after[s]} == set(report)
    codeversion.closure.cache_clear()


def test_the_imports_read_from_a_modules_lines_are_those_of_its_whole_parse():
    # every module of the package, its lazy imports and parenthesized lists included
    import ast

    for path in sorted(codeversion.PACKAGE_DIR.rglob("*.py")):
        source = path.read_text()
        whole = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert sorted(map(ast.dump, codeversion._import_statements(source))) == sorted(map(ast.dump, whole)), path
    # prose in a docstring that reads like an import is not one
    (found,) = codeversion._import_statements('"""\nimport the model from its file\n"""\nimport os\n')
    assert found.names[0].name == "os"
