"""GELU and LayerNorm: with ExecuTorch 1.5.1 both lower to the NPU, Ethos-U55 included
(GELU through a lookup table, LayerNorm decomposed), so this model is fully delegated."""

import torch

torch.manual_seed(0)


class GeluLayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.norm = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


ModelUnderTest = GeluLayerNorm().eval()
ModelInputs = (torch.rand(1, 8, 32),)
