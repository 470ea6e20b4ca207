"""An attention's query scaled after the heads are split (timm's Attention, as in MobileViT-XXS): the
qkv projection reshaped to [3, batch, heads, tokens, head_dim], the query taken from it and
multiplied by the scale. In int8 on Ethos-U55/U65, Vela 5.1.0 crashes (SIGSEGV) on the 5-D SLICE, its
RESHAPE to 4-D and the MUL together; each compiles without the others."""

import torch
from torch import nn


class QueryScale(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x):
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        return q * self.scale, k, v


torch.manual_seed(0)
ModelUnderTest = QueryScale().eval()
ModelInputs = (torch.rand(4, 36, 64),)
