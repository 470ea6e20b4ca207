"""A re-parameterisable block as public models write it (timm's MobileOneBlock, RepViT, FastViT):
the sum of its branches starts at a literal 0 when a branch is absent (`out = scale_out + 0`), then
each kxk branch is added in place."""

import torch
from torch import nn

torch.manual_seed(0)


def conv_bn(cin, cout, k, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    def __init__(self, cin, cout, stride, groups, branches=2):
        super().__init__()
        self.scale = conv_bn(cin, cout, 1, stride, groups)
        self.identity = nn.BatchNorm2d(cout) if stride == 1 and cin == cout else None
        self.kxk = nn.ModuleList(conv_bn(cin, cout, 3, stride, groups) for _ in range(branches))

    def forward(self, x):
        scale_out = self.scale(x)
        identity_out = 0
        if self.identity is not None:
            identity_out = self.identity(x)
        out = scale_out + identity_out
        for branch in self.kxk:
            out += branch(x)
        return torch.relu(out)


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(
            Block(3, 16, 2, 1),
            Block(16, 16, 2, 16),  # depthwise, stride 2: no identity, out = scale_out + 0
            Block(16, 32, 1, 1),  # pointwise to more channels: no identity
            Block(32, 32, 1, 32),  # depthwise, stride 1: identity BatchNorm
        )
        self.head = nn.Conv2d(32, 10, 1)

    def forward(self, x):
        return self.head(self.stages(x).mean((2, 3), keepdim=True)).flatten(1)


def _calibrated(model):
    """BatchNorm statistics from data, as `init: {batchnorm: calibrate}` sets them."""
    model.train()
    with torch.no_grad():
        for _ in range(8):
            model(torch.rand(4, 3, 32, 32))
    return model.eval()


ModelUnderTest = _calibrated(M())
ModelInputs = (torch.rand(1, 3, 32, 32),)
