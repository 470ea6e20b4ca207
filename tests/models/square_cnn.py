"""A CNN whose activations have as many channels as rows and columns (8 x 8 x 8): NCHW and NHWC
have the same shape, so only the layout the lowering records tells which one a TOSA tensor is in
(tests/test_verify.py)."""

import torch

torch.manual_seed(0)


class SquareCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc(x.flatten(1))


ModelUnderTest = SquareCNN().eval()
ModelInputs = (torch.rand(1, 3, 8, 8),)
