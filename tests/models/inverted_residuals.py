"""Four of MobileNetV2's inverted residual blocks (torchvision's own), three with a residual add.
Keeping one add on the CPU with int16 activations (a16w8) is what Vela's fallback does for
MobileNetV2 on Ethos-U55; ExecuTorch's partitioner then leaves a dequantize at a partition's end
(tests/test_vela.py says how)."""

import torch
from torchvision.models.mobilenetv2 import InvertedResidual

torch.manual_seed(0)


class InvertedResiduals(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.features = torch.nn.Sequential(*(InvertedResidual(c, 24, 1, 2) for c in (16, 24, 24, 24)))

    def forward(self, x):
        return self.features(self.stem(x))


ModelUnderTest = InvertedResiduals().eval()
ModelInputs = (torch.rand(1, 3, 16, 16),)
