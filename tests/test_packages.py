"""The packages each stage runs, derived from its imports: what a toolchain upgrade makes stale."""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ethosweep.runtime import packages

REPO = Path(__file__).resolve().parents[1]


def test_each_stage_runs_the_toolchain_its_code_imports_and_what_executorch_runs_for_it():
    runs = {
        stage: set(packages.stage_packages(f"ethosweep.{stage}"))
        for stage in ("compile.export", "compile.quantize", "compile.lower", "vela.compile", "verify.numerics")
    }
    toolchain = {"torch", "torchao", "executorch", "ethos-u-vela", "tosa-tools"}
    assert runs["compile.export"] & toolchain == {"torch"}
    assert runs["compile.quantize"] & toolchain == {"torch", "torchao", "executorch"}
    # the lowering writes TOSA with tosa-tools (ExecuTorch runs it: ALSO_RUNS) and leaves Vela out;
    # torchao comes with ExecuTorch, which requires it
    assert runs["compile.lower"] & toolchain == {"torch", "torchao", "executorch", "tosa-tools"}
    # Vela runs through ExecuTorch's vela_compile: a Vela upgrade reruns this stage and no earlier one;
    # locating what Vela refuses writes parts of the TOSA with tosa-tools' serializer, and the fallback
    # lowers the model again (torch)
    assert runs["vela.compile"] & toolchain == {"torch", "executorch", "torchao", "ethos-u-vela", "tosa-tools"}
    assert runs["verify.numerics"] & toolchain == {"torch", "torchao", "executorch", "tosa-tools"}
    # the torch-free stages run none of the toolchain
    for stage in ("ethosweep.deploy.header", "ethosweep.results.summary", "ethosweep.vela.environment"):
        assert not set(packages.stage_packages(stage)) & toolchain, stage
    versions = packages.stage_versions("ethosweep.vela.compile")
    assert versions["ethos-u-vela"] == "5.1.0" and versions["executorch"] == "1.5.1"


def test_a_stage_runs_what_its_packages_require():
    # Vela compiles with numpy and reads flatbuffers: their upgrades rerun the Vela jobs
    vela = packages.stage_versions("ethosweep.vela.compile")
    assert {"numpy", "flatbuffers"} <= set(vela)
    assert vela["numpy"] == metadata.version("numpy")
    # torch's own requirements (sympy, networkx, ...) go with torch; nothing runs what it does not
    export = set(packages.stage_packages("ethosweep.compile.export"))
    assert {"torch", "sympy", "networkx"} <= export and "ethos-u-vela" not in export
    # a requirement behind an extra comes only with the stage that names it
    assert "tosa-tools" not in export
    assert packages.stage_packages("ethosweep.results.summary") == ("PyYAML",)


def test_a_model_files_modules_beside_it_are_its_code(tmp_path):
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / "__init__.py").write_text("import yaml\n")
    (tmp_path / "blocks" / "mixer.py").write_text("from helpers import scale\n")
    (tmp_path / "helpers.py").write_text("import numpy as np\n")
    (tmp_path / "unused.py").write_text("import scipy\n")
    model = tmp_path / "net.py"
    model.write_text("import os\nimport torch\nfrom blocks.mixer import Mixer\n")
    assert packages.local_modules(str(model)) == (
        str(tmp_path / "blocks" / "__init__.py"),
        str(tmp_path / "blocks" / "mixer.py"),
        str(tmp_path / "helpers.py"),
    )
    found = set(packages.model_packages(file=str(model)))
    assert {"torch", "PyYAML", "numpy"} <= found and "scipy" not in found


def test_a_models_own_code_is_its_files_imports_or_its_packages():
    mnist = set(packages.model_packages(file=str(REPO / "models" / "mnist.py")))
    assert "torch" in mnist and "torchvision" not in mnist
    assert "torchvision" in packages.model_packages(import_path="torchvision.models:mobilenet_v2")
    toy = packages.model_packages(import_path="executorch.examples.models.toy_model:AddModule")
    assert "executorch" in toy and "torchvision" not in toy
    # a broken model file has no versions here: its export says what is wrong with it
    assert packages.model_packages(file=str(REPO / "tests" / "models" / "syntax_error.py")) == ()


def test_imports_are_read_without_importing_and_the_standard_library_is_left_out():
    source = "import os, numpy as np\nfrom torch import nn\nfrom . import x\nimport ethosweep.runtime\n"
    source += "def f():\n    import tosa_reference_model\n"
    assert packages.imported_top_levels(source) == {"numpy", "torch", "tosa_reference_model"}
    assert packages.declared_tools('ALSO_RUNS = ("tosa-tools",)\n') == {"tosa-tools"}


def versions_in_a_new_process(cache: Path, *, pythonpath: Path | None = None) -> dict:
    """stage_versions of the Vela stage as a Snakemake process would ask (a process of its own)."""

    env = {**os.environ, "ETHOSWEEP_CACHE_DIR": str(cache)}
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    script = "import json; from ethosweep.runtime import packages; "
    script += "print(json.dumps(packages.stage_versions('ethosweep.vela.compile')))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout)


def test_stage_versions_are_remembered_until_a_distribution_or_the_code_changes(tmp_path):
    cache = tmp_path / "cache"
    looked_up = versions_in_a_new_process(cache)
    assert looked_up == packages.stage_versions("ethosweep.vela.compile") and looked_up["ethos-u-vela"] == "5.1.0"
    (remembered,) = cache.glob("stage-versions-*.json")
    # the next process reads the same answer back, in the same order (Snakemake compares a param
    # as written: another order would rerun every job)
    assert list(versions_in_a_new_process(cache).items()) == list(looked_up.items())
    # what the file says is what it gets
    answers = json.loads(remembered.read_text())
    answers["ethosweep.vela.compile"]["ethos-u-vela"] = "remembered"
    remembered.write_text(json.dumps(answers))
    assert versions_in_a_new_process(cache)["ethos-u-vela"] == "remembered"
    # a distribution installed on the import path: looked up again (and the other answers kept)
    site = tmp_path / "site"
    installed = site / "example_tool-1.0.dist-info"
    installed.mkdir(parents=True)
    (installed / "METADATA").write_text("Metadata-Version: 2.1\nName: example-tool\nVersion: 1.0\n")
    assert versions_in_a_new_process(cache, pythonpath=site)["ethos-u-vela"] == "5.1.0"
    assert len(list(cache.glob("stage-versions-*.json"))) == 2
    # an edit of ethosweep's code (its modification time here): looked up again
    source = Path(packages.__file__).with_name("activity.py")
    stat = source.stat()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert versions_in_a_new_process(cache)["ethos-u-vela"] == "5.1.0"
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert versions_in_a_new_process(cache)["ethos-u-vela"] == "remembered"


def test_a_models_versions_follow_what_its_file_imports_now(tmp_path, monkeypatch):
    """model_versions is remembered by the modules the model's code imports, read afresh each time:
    an edit that imports something else gets that something's versions, not the remembered ones."""
    monkeypatch.setenv("ETHOSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    packages._remembered.cache_clear()
    try:
        model = tmp_path / "net.py"
        model.write_text("import yaml\n")
        assert set(packages.model_versions(file=str(model))) == {"PyYAML"}
        model.write_text("import numpy\n")
        assert set(packages.model_versions(file=str(model))) == {"numpy"}
        model.write_text("import yaml\n")
        assert packages.model_versions(file=str(model)) == {"PyYAML": metadata.version("PyYAML")}
        (remembered,) = (tmp_path / "cache").glob("stage-versions-*.json")
        assert set(json.loads(remembered.read_text())) == {"model imports yaml", "model imports numpy"}
    finally:
        packages._remembered.cache_clear()
