"""A model whose forward() crashes its process in native code (a null pointer read): the
export stage's process dies from SIGSEGV, as it would in a broken native extension."""

import ctypes

import torch


class Segfaults(torch.nn.Module):
    def forward(self, x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return x


ModelUnderTest = Segfaults()
ModelInputs = (torch.ones(1, 4),)
