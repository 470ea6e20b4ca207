"""Linear, GELU, linear, softmax: the operators around attention that ExecuTorch lowers through
lookup tables (GELU; softmax's exp and reciprocal) and reductions, fully delegated with int16
activations (a16w8) too (tests/test_verify.py)."""

import torch

torch.manual_seed(0)


class GeluSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.nn.functional.gelu(self.fc1(x))), dim=-1)


ModelUnderTest = GeluSoftmax().eval()
ModelInputs = (torch.rand(1, 8, 32),)
