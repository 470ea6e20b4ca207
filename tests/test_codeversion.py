"""Library edits must rerun exactly the stages whose code changed."""

import shutil
from pathlib import Path

from ethosweep import codeversion


def test_each_stage_hashes_its_own_module_and_what_it_imports():
    assert "ethosweep.compile_spec" in codeversion.closure("ethosweep.lower")
    assert "ethosweep.compile_spec" in codeversion.closure("ethosweep.vela")
    # The lowering does not run Vela, and a cell's Vela run does not lower: neither reruns the other.
    assert "ethosweep.vela" not in codeversion.closure("ethosweep.lower")
    assert "ethosweep.lower" not in codeversion.closure("ethosweep.vela")
    assert set(codeversion.closure("ethosweep.header")) == {
        "ethosweep.header", "ethosweep.integrity", "ethosweep.errors", "ethosweep.io"}
    # The job runner is not part of any stage: editing it reruns nothing.
    assert not [m for m in ("export", "quantize", "lower", "vela", "header", "summary")
                if "ethosweep.jobs" in codeversion.closure(f"ethosweep.{m}")]


def test_editing_a_module_changes_the_version_of_the_stages_that_use_it(tmp_path, monkeypatch):
    package = tmp_path / "ethosweep"
    shutil.copytree(Path(codeversion.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codeversion, "PACKAGE_DIR", package)
    codeversion.closure.cache_clear()
    before = {stage: codeversion.code_version(f"ethosweep.{stage}") for stage in ("export", "lower", "vela", "header")}

    with open(package / "header.py", "a") as f:
        f.write("\n# an edit\n")
    after = {stage: codeversion.code_version(f"ethosweep.{stage}") for stage in before}

    assert after["header"] != before["header"]
    assert {s for s in before if before[s] == after[s]} == {"export", "lower", "vela"}
    codeversion.closure.cache_clear()
