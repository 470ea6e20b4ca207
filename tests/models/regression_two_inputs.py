"""A regression model with two inputs and 24 outputs (seeded random weights): not a classifier,
so its numerics are judged by cosine and relative error against float, never by top-1."""

import torch

torch.manual_seed(0)


class TwoInputRegression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(8, 32)
        self.head = torch.nn.Linear(32, 24)

    def forward(self, x, y):
        return self.head(torch.relu(self.a(x) + self.b(y)))


ModelUnderTest = TwoInputRegression().eval()
ModelInputs = (torch.rand(1, 16) * 2 - 1, torch.rand(1, 8) * 2 - 1)
