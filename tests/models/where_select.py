"""A threshold on the input written with torch.where: on Ethos-U55 the comparison's boolean operand has
no TOSA type, so `gt` and `where` stay on the CPU. The constants they compare with (0.5, zeros_like)
become a partition of their own that reads none of the inputs its delegate call passes it (the CPU's
quantize of the input), and the next partition's input is the CPU's quantize node itself."""

import torch

torch.manual_seed(0)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = torch.where(x > 0.5, x, torch.zeros_like(x))
        return self.head(self.conv(x))


ModelUnderTest = M().eval()
ModelInputs = (torch.rand(1, 3, 8, 8),)
