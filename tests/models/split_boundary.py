"""A 1x1 convolution split in two, one half through a matrix product: YOLO's C2PSA attention in
miniature. With int16 activations on Ethos-U55 the partitioner leaves the bmm on the CPU, and
ExecuTorch 1.5 leaves the split's float halves inside the NPU partition at its exit
(pytorch/executorch#19364, #22966): the program compiles and will not run."""

import torch
from torch import nn


class SplitBoundary(nn.Module):
    def __init__(self):
        super().__init__()
        self.cv1 = nn.Conv2d(8, 16, 1)
        self.cv2 = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        a, b = self.cv1(x).split((8, 8), dim=1)
        attention = torch.bmm(b.flatten(2).transpose(1, 2), b.flatten(2))  # [1, 16, 16], on the CPU
        b = b + attention.mean(dim=-1).reshape(1, 1, 4, 4)
        return self.cv2(torch.cat((a, b), dim=1))


torch.manual_seed(0)
ModelUnderTest = SplitBoundary().eval()
ModelInputs = (torch.rand(1, 8, 4, 4),)
