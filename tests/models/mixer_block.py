"""A healthy mixer block, as a zoo of small transformers has them: LayerNorm, Linear, GELU, Linear,
and the residual around them. With int16 activations its LayerNorm lowers to a few hundred int16
steps from the quantized model (ExecuTorch's own a16w8 layer_norm tests allow 400 at a finer
quantizer epsilon), while its output is as close to float as the quantized model's."""

import torch

torch.manual_seed(0)


class MixerBlock(torch.nn.Module):
    def __init__(self, width: int = 64, hidden: int = 128):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


ModelUnderTest = MixerBlock().eval()
ModelInputs = (2.0 + 0.2 * torch.randn(1, 16, 64),)
