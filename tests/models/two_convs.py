"""Two convolutions over a 3-channel 16x16 input and a linear layer: its NCHW input needs a TRANSPOSE
on the NPU, which a channels-last export drops (tests/test_cpu_part.py)."""

import torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 16 * 16, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1))


ModelUnderTest = Net().eval()
ModelInputs = (torch.rand(1, 3, 16, 16),)
