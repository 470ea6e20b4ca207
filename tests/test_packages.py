"""The packages each stage runs, derived from its imports: what a toolchain upgrade makes stale."""

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
