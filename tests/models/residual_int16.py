"""A residual block as MobileNetV2 has them: a 1x1 projection added to the block's input. With int16
activations (a16w8) ExecuTorch lowers the add in int32: the skip, a convolution's result without an
activation, reaches it through a RESCALE of the convolution's INT48 accumulator straight to int32,
which Vela 5.1.0 refuses on Ethos-U55 ("Non-passthrough operation (Conv2D) could not run on NPU")."""

import torch

torch.manual_seed(0)


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.project = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = self.stem(x)  # no activation: the skip is the convolution's own result, as in MobileNetV2
        return y + self.project(torch.relu(y))


ModelUnderTest = Residual().eval()
ModelInputs = (torch.rand(1, 3, 16, 16),)
