"""A convolution split in two, one half through a second convolution and added to the other (YOLO's
C2f and C2PSA in miniature). With int16 activations the second convolution's INT48 result is rescaled
straight into the add, and the only TOSA tensor named after it is the transpose of its input."""

import torch
from torch import nn


class SplitConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.cv1 = nn.Conv2d(8, 16, 1)
        self.cv2 = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        a, b = self.cv1(x).split((8, 8), dim=1)
        return self.cv2(b) + a


torch.manual_seed(0)
ModelUnderTest = SplitConv().eval()
ModelInputs = (torch.rand(1, 8, 4, 4),)
