"""The zoo presets' models (ethosweep.zoo.deployable) as their exporters deploy them, built
offline: their outputs, the packages their rows record, and what a run without the optional
packages says."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import REPO, typed
from ethosweep.runtime.codeversion import code_version, own_model_modules
from ethosweep.runtime.packages import extra_providing, model_versions
from ethosweep.zoo import deployable
from ethosweep.zoo.models import _install_hint


@pytest.mark.parametrize(
    ("build", "shape", "outputs"),
    [
        # box regressions and class logits per anchor: torchvision's own decoding and NMS left out
        (lambda: deployable.ssdlite(), (1, 3, 160, 160), [(1, 840, 4), (1, 840, 91)]),
        (lambda: deployable.segmenter("lraspp_mobilenet_v3_large"), (1, 3, 128, 128), [(1, 21, 128, 128)]),
        (lambda: deployable.segmenter("deeplabv3_mobilenet_v3_large"), (1, 3, 128, 128), [(1, 21, 128, 128)]),
        (lambda: deployable.recurrent_kws("gru"), (1, 1, 49, 10), [(1, 12)]),
        (lambda: deployable.recurrent_kws("lstm"), (1, 1, 49, 10), [(1, 12)]),
    ],
)
def test_the_presets_models_give_what_their_exporters_deploy(build, shape, outputs):
    torch.manual_seed(0)
    model = build().eval()
    x = torch.rand(shape)
    with torch.no_grad():
        got = model(x)
    got = got if isinstance(got, tuple) else (got,)
    assert [tuple(t.shape) for t in got] == outputs
    assert all(torch.isfinite(t).all() for t in got)
    exported = torch.export.export(model, (x,))  # what the export stage does with it
    assert len(exported.graph_signature.user_outputs) == len(outputs)


def test_yolo_and_timm_build_offline_with_the_optional_packages(tmp_path):
    """The command the detection and vision-transformer presets' users type pulls in the `zoos`
    extra (locked in uv.lock); with it, YOLO builds from the YAML Ultralytics ships and its head
    gives one tensor of boxes and 80 class scores per anchor; timm builds ViT-Tiny at 64x64."""
    script = (
        "import json, torch, timm; from ethosweep.zoo.deployable import yolo; "
        "x = torch.rand(1, 3, 160, 160); "
        "shapes = {c: list(yolo(c)(x).shape) for c in ('yolo11n.yaml', 'yolo26n.yaml')}; "
        "vit = timm.create_model('vit_tiny_patch16_224', pretrained=False, img_size=64, num_classes=10).eval(); "
        "shapes['vit_tiny'] = list(vit(torch.rand(1, 3, 64, 64)).shape); print(json.dumps(shapes))"
    )
    # a scratch HOME: Ultralytics writes its settings file there
    proc = typed(f'HOME={tmp_path} uv run --extra zoos python -c "{script}"', REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    # 4 box coordinates + 80 classes, over 20x20 + 10x10 + 5x5 anchors at strides 8, 16, 32
    assert shapes == {"yolo11n.yaml": [1, 84, 525], "yolo26n.yaml": [1, 84, 525], "vit_tiny": [1, 10]}


def test_a_model_built_by_ethosweep_records_the_packages_its_builder_imports():
    """An `import: ethosweep.zoo.deployable:...` model: its rows record torchvision (and
    Ultralytics, where installed) as a torchvision model's record torchvision, and editing the
    builder changes the export's code version."""
    assert own_model_modules("ethosweep.zoo.deployable:yolo") == ("ethosweep.zoo.deployable",)
    assert own_model_modules("timm:create_model") == own_model_modules("ethosweep.nowhere:x") == ()
    assert "torchvision" in model_versions(None, "ethosweep.zoo.deployable:segmenter")
    assert code_version("ethosweep.compile.export") != code_version(
        "ethosweep.compile.export", "ethosweep.zoo.deployable"
    )


def test_a_missing_optional_package_says_which_extra_has_it():
    assert extra_providing("timm") == extra_providing("ultralytics") == "zoos"
    assert extra_providing("torch") is None
    assert _install_hint(ModuleNotFoundError("No module named 'timm'", name="timm")) == (
        " (ethosweep's optional 'zoos' packages have it: run with `uv run --extra zoos ...`)"
    )
    assert _install_hint(ModuleNotFoundError("No module named 'nowhere'", name="nowhere")) == ""
