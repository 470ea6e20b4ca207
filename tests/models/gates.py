"""An LSTM cell's gates, as torch.nn.LSTM computes them: one linear layer for all four gates, cut
into four by `chunk`, each through its own activation. With int16 activations (a16w8) each sigmoid
and tanh is a TOSA TABLE that ExecuTorch's passes add without provenance, downstream of the four
SLICEs of the same sum: the tensor that holds a gate's activation is its table's, not a slice's."""

import torch

torch.manual_seed(0)


class Gates(torch.nn.Module):
    def __init__(self, features: int = 16, hidden: int = 8):
        super().__init__()
        self.gates = torch.nn.Linear(features, 4 * hidden)

    def forward(self, x):
        i, f, g, o = self.gates(x).chunk(4, -1)
        return torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f) * torch.sigmoid(o)


ModelUnderTest = Gates().eval()
ModelInputs = (torch.rand(1, 5, 16) * 2 - 1,)
