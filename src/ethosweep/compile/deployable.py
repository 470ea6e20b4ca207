"""Zoo models in the form they are deployed in, built offline with random weights.

Each function returns an nn.Module whose outputs are what a device runs: a detector's head before
non-maximum suppression (left to the host, as Ultralytics' and torchvision's exporters leave it),
a segmenter's logits without its dict wrapper. The packages they import (ultralytics, timm) are the
optional `zoos` dependencies (`uv run --extra zoos ...`); torchvision is a dependency.
A config names them as `import: ethosweep.compile.deployable:<function>`.
"""

from __future__ import annotations

import torch
from torch import nn


def yolo(cfg: str = "yolo11n.yaml", nc: int = 80) -> nn.Module:
    """Ultralytics YOLO built from its architecture YAML (shipped in the package, no download),
    its detection head in export mode as Ultralytics exports it for ExecuTorch: one tensor of
    boxes and class scores per anchor, [1, 4 + nc, anchors], non-maximum suppression on the host."""
    from ultralytics.nn.modules.head import Detect
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils import LOGGER

    LOGGER.setLevel("WARNING")  # the architecture table Ultralytics prints while building
    model = DetectionModel(cfg, nc=nc, verbose=False).eval()
    if getattr(model, "end2end", False):
        model.end2end = False  # Ultralytics' ExecuTorch export disables the NMS-free branch (no top-k)
    for module in model.modules():
        if isinstance(module, Detect):
            module.export, module.format, module.dynamic = True, "executorch", False
    return model


class _HeadOutputs(nn.Module):
    """A torchvision SSD/SSDlite detector's backbone and head: box regressions and class logits per
    anchor, without the transform, anchor decoding and NMS that torchvision runs on the host."""

    def __init__(self, detector: nn.Module):
        super().__init__()
        self.backbone, self.head = detector.backbone, detector.head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = self.head(list(self.backbone(x).values()))
        return outputs["bbox_regression"], outputs["cls_logits"]


def ssdlite(num_classes: int = 91) -> nn.Module:
    """torchvision's SSDlite320 with a MobileNetV3-Large backbone, its backbone and head."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    return _HeadOutputs(ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=num_classes))


class _Logits(nn.Module):
    """A torchvision segmenter's per-pixel logits (its 'out'), upsampled to the input as it does."""

    def __init__(self, segmenter: nn.Module):
        super().__init__()
        self.segmenter = segmenter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.segmenter(x)["out"]


def segmenter(name: str = "lraspp_mobilenet_v3_large", num_classes: int = 21) -> nn.Module:
    """A torchvision semantic segmenter (lraspp_mobilenet_v3_large, deeplabv3_mobilenet_v3_large)."""
    from torchvision.models import segmentation

    build = getattr(segmentation, name)
    return _Logits(build(weights=None, weights_backbone=None, num_classes=num_classes))


class RecurrentKWS(nn.Module):
    """A convolutional-recurrent keyword spotter (CRNN) over 49 frames of 10 MFCCs, as in Arm's ML-zoo
    and the KWS literature: a strided convolution, one recurrent layer over time, a classifier on its
    last state."""

    def __init__(self, cell: str = "gru", hidden: int = 64, classes: int = 12):
        super().__init__()
        convolution = nn.Conv2d(1, 32, (10, 4), stride=(2, 1), padding=(4, 0))
        self.conv = nn.Sequential(convolution, nn.BatchNorm2d(32), nn.ReLU())
        recurrent = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = recurrent(32 * 7, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:  # [1, 1, 49, 10]
        features = self.conv(mfcc)  # [1, 32, 24, 7]
        sequence = features.permute(0, 2, 1, 3).flatten(2)  # [1, 24, 224]: time, then channels x MFCCs
        states, _ = self.rnn(sequence)
        return self.classifier(states[:, -1])


def recurrent_kws(cell: str = "gru", hidden: int = 64, classes: int = 12) -> nn.Module:
    return RecurrentKWS(cell, hidden, classes)
