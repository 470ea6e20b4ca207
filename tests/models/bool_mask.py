"""Partly delegable: Ethos-U55 cannot run the comparison (a bool tensor), so it stays on the CPU."""

import torch

torch.manual_seed(0)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = self.conv(x)
        y = y * (y > 0.5)  # a comparison: Ethos-U55 cannot run it
        return self.fc(torch.flatten(y, 1))


ModelUnderTest = M().eval()
ModelInputs = (torch.rand(1, 3, 8, 8),)
