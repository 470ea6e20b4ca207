"""Loading models: both sources, reproducible weights and inputs, and clear errors."""

from pathlib import Path

import pytest
import torch

from ethosweep.matrix.models import InputSpec, ModelSpec
from ethosweep.zoo.models import ModelError, load_model, make_inputs

HERE = Path(__file__).parent
REPO = HERE.parent


def test_model_file_loads_with_its_inputs_and_seeded_weights():
    spec = ModelSpec(name="mnist", file="models/mnist.py")
    model, inputs = load_model(spec, seed=0, base_dir=REPO)
    again, _ = load_model(spec, seed=0, base_dir=REPO)
    assert isinstance(inputs, tuple) and inputs[0].shape == (1, 1, 28, 28)
    assert model(*inputs).shape == (1, 10)
    assert torch.equal(model.conv1.weight, again.conv1.weight)


def test_import_model_is_seeded_and_gets_inputs_in_range():
    spec = ModelSpec(
        name="ae",
        import_path="executorch.examples.models.mlperf_tiny:DeepAutoEncoder",
        inputs=(InputSpec((1, 640), "float32", -1.0, 1.0),),
    )
    a, inputs = load_model(spec, seed=3)
    b, _ = load_model(spec, seed=3)
    c, _ = load_model(spec, seed=4)
    first = next(a.parameters())
    assert torch.equal(first, next(b.parameters())) and not torch.equal(first, next(c.parameters()))
    assert inputs[0].shape == (1, 640) and -1.0 <= inputs[0].min() and inputs[0].max() < 1.0


def test_input_dtypes():
    ints, flags = make_inputs((InputSpec((5,), "int64", 0, 10), InputSpec((3,), "bool")), seed=0)
    assert ints.dtype == torch.int64 and 0 <= ints.min() and ints.max() < 10
    assert flags.dtype == torch.bool


@pytest.mark.parametrize(
    "file, message",
    [
        ("syntax_error.py", "model 'bad' (tests/models/syntax_error.py): syntax error at line 3"),
        ("no_inputs.py", "the file defines no ModelInputs; a model file must define module-level ModelUnderTest"),
        ("not_a_tuple.py", "ModelInputs must be a tuple of example inputs, got Tensor (write `ModelInputs = (x,)`"),
        ("missing.py", "model 'bad' (tests/models/missing.py): file not found"),
    ],
)
def test_broken_model_files_say_what_is_wrong(file, message):
    with pytest.raises(ModelError) as error:
        load_model(ModelSpec(name="bad", file=f"tests/models/{file}"), seed=0, base_dir=REPO)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "path, message",
    [
        (
            "no_such_package.models:Net",
            "model 'bad' (no_such_package.models:Net): import path does not resolve: No module named 'no_such_package'",
        ),
        ("torchvision.models:no_such_net", "module torchvision.models has no attribute 'no_such_net'"),
        (
            "ethosweep.compile.deployable:fomo",
            "No module named 'ethosweep.compile.deployable' (it moved: import: ethosweep.zoo.deployable:fomo)",
        ),
    ],
)
def test_import_paths_that_do_not_resolve(path, message):
    with pytest.raises(ModelError) as error:
        load_model(ModelSpec(name="bad", import_path=path, inputs=(InputSpec((1,)),)), seed=0)
    assert message in str(error.value)


def test_batchnorm_statistics_of_random_weights_are_calibrated_before_export():
    """Random weights leave BatchNorm at mean 0, variance 1 and MobileNetV2's outputs ~1e-9; re-estimated
    on inputs in the model's range, they give outputs of realistic size (ethosweep.zoo.models.initialise)."""
    from ethosweep.zoo.models import initialise

    spec = ModelSpec(
        name="mv2", import_path="torchvision.models:mobilenet_v2", inputs=(InputSpec((1, 3, 32, 32), "float32", 0, 1),)
    )
    model, inputs = load_model(spec, seed=0)
    with torch.no_grad():
        before = float(model(*inputs).abs().max())
    said = initialise(model, {"batchnorm": "calibrate"}, inputs, seed=0)
    with torch.no_grad():
        after = float(model(*inputs).abs().max())
    assert before < 1e-6 < 1e-2 < after
    assert said == "52 BatchNorm layers' statistics re-estimated on 32 inputs in the input range, in one batch"
    assert not model.training and model.features[1].conv[0][1].momentum is None
    again, _ = load_model(spec, seed=0)
    initialise(again, {"batchnorm": "calibrate"}, inputs, seed=0)
    assert torch.equal(again.features[1].conv[0][1].running_var, model.features[1].conv[0][1].running_var)
    assert initialise(again, {}, inputs, seed=0) == ""


class _BatchOfOne(torch.nn.Module):
    """A model written for batch 1 (it reshapes to it), or one whose batch runs out of memory."""

    def __init__(self, fails_with: BaseException | None = None):
        super().__init__()
        self.norm, self.fails_with = torch.nn.BatchNorm2d(3), fails_with

    def forward(self, x):
        if x.shape[0] > 1 and self.fails_with is not None:
            raise self.fails_with
        return self.norm(x).reshape(1, -1)


def test_a_batchnorm_calibration_that_falls_back_says_so_and_memory_is_never_a_reason_to():
    """A model that cannot run the 32 inputs as one batch is calibrated one input at a time (other
    statistics: each input's variance), and its export record says so; running out of memory on the
    batch (torch's allocator raises a RuntimeError) is the machine's failure, raised, never another export."""
    from ethosweep.runtime.errors import Fault, fault_of
    from ethosweep.zoo.models import initialise

    inputs = (torch.rand(1, 3, 4, 4),)
    said = initialise(_BatchOfOne(RuntimeError("shape '[1, -1]' is invalid")), {"batchnorm": "calibrate"}, inputs, 0)
    assert said.startswith("1 BatchNorm layers' statistics re-estimated on 32 inputs in the input range, one at a time")
    assert "RuntimeError: shape '[1, -1]' is invalid" in said
    allocator = RuntimeError("[enforce fail at alloc_cpu.cpp:116] DefaultCPUAllocator: not enough memory")
    for memory in (MemoryError(), allocator):
        with pytest.raises(type(memory)) as raised:
            initialise(_BatchOfOne(memory), {"batchnorm": "calibrate"}, inputs, 0)
        assert fault_of(raised.value) is Fault.MEMORY
