"""The export stage on good and broken models (real torch.export)."""

from pathlib import Path

import pytest
import torch

from ethosweep.compile.artifacts import load_tensors
from ethosweep.compile.export import export_model
from ethosweep.runtime.io import read_json
from ethosweep.zoo.models import ModelError

REPO = Path(__file__).resolve().parents[1]


def run_export(tmp_path: Path, file: str) -> dict:
    out = {
        k: str(tmp_path / n)
        for k, n in [("program", "p.pt2"), ("inputs", "i.pt"), ("reference", "r.pt"), ("meta", "m.json")]
    }
    export_model(model={"name": "m", "file": file}, seed=0, base_dir=str(REPO), **out)
    return out


def test_export_writes_a_reloadable_program_and_the_float_reference(tmp_path):
    out = run_export(tmp_path, "models/mnist.py")
    program = torch.export.load(out["program"])
    inputs = load_tensors(out["inputs"])
    (reference,) = load_tensors(out["reference"])
    assert torch.allclose(program.module()(*inputs), reference)
    meta = read_json(out["meta"])
    assert meta["parameters"] == 16 * 9 + 16 + 32 * 16 * 9 + 32 + 1568 * 64 + 64 + 64 * 10 + 10
    # each tensor's bytes too: the firmware plan sizes the runner's input buffers from them
    assert meta["inputs"] == [{"shape": [1, 1, 28, 28], "dtype": "float32", "bytes": sum(t.nbytes for t in inputs)}]
    assert meta["outputs"] == [{"shape": [1, 10], "dtype": "float32", "bytes": 40}]
    assert len(meta["source_sha256"]) == 64 and meta["versions"]["torch"] == "2.13.0"


@pytest.mark.parametrize(
    "file, message",
    [
        ("tests/models/data_dependent.py", "torch.export failed"),
        ("tests/models/forward_raises.py", "forward() on ModelInputs raised RuntimeError"),
    ],
)
def test_models_that_cannot_be_exported_fail_with_the_cause(tmp_path, file, message):
    with pytest.raises(ModelError) as error:
        run_export(tmp_path, file)
    assert f"model 'm' ({file}): {message}" in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing half-written
