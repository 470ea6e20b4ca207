"""Two inverted residual blocks in a row, as MobileNetV2, MobileNetV3 and SSDlite chain them. With
int16 activations (a16w8) on Ethos-U85, ExecuTorch adds each block's projection in int32: the
convolution's INT48 accumulator is rescaled straight into the add, so the projection's own int16
activation, where the quantized model rounds and clamps it, is never computed on the NPU.
Calibrated on an example input whose values are mostly small, random inputs in its range go past
what calibration saw: the quantized model saturates the projection where the NPU keeps it whole."""

import torch
from torch import nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.expand = nn.Conv2d(channels, 2 * channels, 1)
        self.project = nn.Conv2d(2 * channels, channels, 1)

    def forward(self, x):
        return x + self.project(torch.relu(self.expand(x)))


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(Block(8), Block(8))

    def forward(self, x):
        return self.blocks(self.stem(x))


def _mostly_small() -> torch.Tensor:
    """Uniform in [0, 0.1) but for one value at 1: random inputs like it are uniform in [0, 1), ten
    times what calibration saw. Not square (C, H, W differ), so no layout can be mistaken for another."""
    x = torch.rand(1, 3, 6, 10) * 0.1
    x[0, 0, 0, 0] = 1.0
    return x * 100


ModelUnderTest = TwoBlocks().eval()
ModelInputs = (_mostly_small(),)
