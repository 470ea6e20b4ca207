"""The packages each stage runs, derived from its imports: what a toolchain upgrade makes stale."""

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
    # the lowering writes TOSA with tosa-tools (ExecuTorch runs it: ALSO_RUNS) and leaves Vela out
    assert runs["compile.lower"] & toolchain == {"torch", "executorch", "tosa-tools"}
    # Vela runs through ExecuTorch's vela_compile: a Vela upgrade reruns this stage and no earlier one
    assert runs["vela.compile"] & toolchain == {"executorch", "ethos-u-vela"}
    assert runs["verify.numerics"] & toolchain == {"torch", "executorch", "tosa-tools"}
    # the torch-free stages run none of the toolchain
    for stage in ("ethosweep.deploy.header", "ethosweep.results.summary", "ethosweep.vela.environment"):
        assert not set(packages.stage_packages(stage)) & toolchain, stage
    versions = packages.stage_versions("ethosweep.vela.compile")
    assert versions["ethos-u-vela"] == "5.1.0" and versions["executorch"] == "1.5.1"


def test_a_models_own_code_is_its_files_imports_or_its_packages():
    assert packages.model_packages(file=str(REPO / "models" / "mnist.py")) == ("torch",)
    assert packages.model_packages(import_path="torchvision.models:mobilenet_v2") == ("torchvision",)
    assert packages.model_packages(import_path="executorch.examples.models.toy_model:AddModule") == ("executorch",)
    # a broken model file has no versions here: its export says what is wrong with it
    assert packages.model_packages(file=str(REPO / "tests" / "models" / "syntax_error.py")) == ()


def test_imports_are_read_without_importing_and_the_standard_library_is_left_out():
    source = "import os, numpy as np\nfrom torch import nn\nfrom . import x\nimport ethosweep.runtime\n"
    source += "def f():\n    import tosa_reference_model\n"
    assert packages.imported_top_levels(source) == {"numpy", "torch", "tosa_reference_model"}
    assert packages.declared_tools('ALSO_RUNS = ("tosa-tools",)\n') == {"tosa-tools"}
