"""A small vision transformer for a microcontroller: 32x32 RGB, 4x4 patches (64 tokens of 64
features), two pre-norm encoder blocks (multi-head self-attention written out: linear q, k, v,
matmul, softmax; LayerNorm, GELU MLP), mean pooling and a 10-class head. Random weights (seeded).

Attention is written with plain operators, as in most exported transformers, so that the operator
map shows what ExecuTorch's Arm backend does with each of them (config/zoos/attention.yaml).
"""

import torch

torch.manual_seed(0)


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, n, d))


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm1, self.attention = torch.nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(torch.nn.Module):
    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, classes: int = 10):
        super().__init__()
        self.patches = torch.nn.Conv2d(3, dim, kernel_size=4, stride=4)
        self.position = torch.nn.Parameter(torch.randn(1, 64, dim) * 0.02)
        self.blocks = torch.nn.Sequential(*(Block(dim, heads, 2 * dim) for _ in range(depth)))
        self.norm, self.head = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patches(x).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


ModelUnderTest = TinyViT().eval()
ModelInputs = (torch.rand(1, 3, 32, 32),)
