"""Zoo models in the form they are deployed in, built offline with random weights.

Each function returns an nn.Module whose outputs are what a device runs: a detector's head before
non-maximum suppression (left to the host, as Ultralytics' and torchvision's exporters leave it),
a segmenter's logits without its dict wrapper. The packages they import (ultralytics, timm) are the
optional `zoos` dependencies (`uv run --extra zoos ...`); torchvision is a dependency.
A config names them as `import: ethosweep.zoo.deployable:<function>`.
"""

from __future__ import annotations

import torch
from torch import nn


def yolo(cfg: str = "yolo11n.yaml", nc: int | None = None) -> nn.Module:
    """Ultralytics YOLO built from its architecture YAML (shipped in the package, no download): a
    detector, segmenter (`-seg`) or pose model (`-pose`), its head in export mode as Ultralytics
    exports it for ExecuTorch: [1, 4 + nc (+ keypoints), anchors] (+ the masks' prototypes for a
    segmenter), non-maximum suppression on the host. `nc`: the YAML's own class count when None."""
    from ultralytics.nn.modules.head import Detect
    from ultralytics.nn.tasks import DetectionModel, PoseModel, SegmentationModel
    from ultralytics.utils import LOGGER

    LOGGER.setLevel("WARNING")  # the architecture table Ultralytics prints while building
    # by the YAML's name, as Ultralytics names its task files (guess_model_task warns for detectors)
    task = SegmentationModel if "-seg" in cfg else PoseModel if "-pose" in cfg else DetectionModel
    model = task(cfg, verbose=False, **({"nc": nc} if nc is not None else {})).eval()
    if getattr(model, "end2end", False):
        model.end2end = False  # Ultralytics' ExecuTorch export disables the NMS-free branch (no top-k)
    for module in model.modules():
        if isinstance(module, Detect):  # Segment and Pose are Detect's subclasses
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


class _Fomo(nn.Module):
    """Edge Impulse's FOMO: MobileNetV2 cut at the 1/8-resolution feature map, then a 1x1 head giving
    per-cell class logits (background first) on a grid of 1/8 the input (12x12 at 96x96)."""

    def __init__(self, width: float, classes: int):
        super().__init__()
        from torchvision.models import mobilenet_v2

        self.backbone = mobilenet_v2(width_mult=width).features[:7]  # through block 6, stride 8
        channels = self.backbone[-1].out_channels
        self.head = nn.Sequential(nn.Conv2d(channels, 32, 1), nn.ReLU(), nn.Conv2d(32, classes + 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def fomo(width: float = 0.35, classes: int = 2) -> nn.Module:
    return _Fomo(width, classes)


class StreamingWakeword(nn.Module):
    """A 1-D depthwise-separable convolutional keyword spotter over log-mel frames, in the shape of
    MLPerf Tiny's streaming-wakeword reference (its Keras code is not packaged): the mel bins as
    channels, depthwise convolutions over time with growing dilation, pointwise mixing, global
    pooling, three classes (the wake word, other speech, silence)."""

    def __init__(self, mels: int = 40, width: int = 64, classes: int = 3):
        super().__init__()
        layers, channels = [nn.Conv2d(mels, width, (1, 3)), nn.BatchNorm2d(width), nn.ReLU()], width
        for dilation in (1, 2, 4, 8):
            layers += [
                nn.Conv2d(channels, channels, (1, 3), dilation=(1, dilation), groups=channels),
                nn.Conv2d(channels, width, 1),
                nn.BatchNorm2d(width),
                nn.ReLU(),
            ]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(width, classes)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:  # [1, mels, 1, time]
        return self.classifier(self.features(frames).mean(dim=(2, 3)))


def streaming_wakeword(mels: int = 40, width: int = 64, classes: int = 3) -> nn.Module:
    return StreamingWakeword(mels, width, classes)


class _StatefulLSTM(nn.Module):
    """ExecuTorch's LSTM example model (examples/models/lstm: torch.nn.quantizable's two-layer LSTM, 10
    inputs, 20 hidden) with its state as separate inputs: its example passes (x, (h0, c0))."""

    def __init__(self):
        super().__init__()
        from executorch.examples.models.lstm.model import LSTMModel

        self.lstm = LSTMModel().get_eager_model()

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        output, _ = self.lstm(x, (h0, c0))
        return output


def executorch_lstm() -> nn.Module:
    return _StatefulLSTM()


class RNNoise(nn.Module):
    """RNNoise's network (Valin 2018; in Arm's ML Embedded Evaluation Kit) over a window of frames of
    42 features: a dense layer, three GRUs fed the features and each other, 22 band gains and a
    voice-activity probability per frame."""

    def __init__(self, features: int = 42, bands: int = 22):
        super().__init__()
        self.dense = nn.Linear(features, 24)
        self.vad_gru = nn.GRU(24, 24, batch_first=True)
        self.vad = nn.Linear(24, 1)
        self.noise_gru = nn.GRU(24 + 24 + features, 48, batch_first=True)
        self.denoise_gru = nn.GRU(24 + 48 + features, 96, batch_first=True)
        self.gains = nn.Linear(96, bands)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # [1, time, 42]
        dense = torch.tanh(self.dense(frames))
        vad_state, _ = self.vad_gru(dense)
        noise_state, _ = self.noise_gru(torch.cat([dense, vad_state, frames], dim=-1))
        denoise_state, _ = self.denoise_gru(torch.cat([vad_state, noise_state, frames], dim=-1))
        return torch.sigmoid(self.gains(denoise_state)), torch.sigmoid(self.vad(vad_state))


def rnnoise(features: int = 42, bands: int = 22) -> nn.Module:
    return RNNoise(features, bands)
