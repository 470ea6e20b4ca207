"""Library edits must rerun exactly the stages whose code changed."""

import shutil
from pathlib import Path

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

    with open(package / "deploy" / "header.py", "a") as f:
        f.write("\n# an edit\n")
    after = {stage: codeversion.code_version(module) for stage, module in STAGES.items()}

    assert after["header"] != before["header"]
    assert {s for s in before if before[s] == after[s]} == {"export", "lower", "vela", "summary"}
    codeversion.closure.cache_clear()
