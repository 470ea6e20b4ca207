"""A model with an operator the NPU does not take and no runner kernel library implements: a sort
(aten::sort.values has no portable kernel in ExecuTorch 1.5.1). It compiles; its program would fail
at load on the board, and the sweep says so (ethosweep.firmware.kernels)."""

import torch

torch.manual_seed(0)


class SortsItsFeatures(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x):
        features = torch.relu(self.conv(x)).flatten(1)
        return torch.sort(features, dim=1).values


ModelUnderTest = SortsItsFeatures().eval()
ModelInputs = (torch.rand(1, 1, 6, 6),)
