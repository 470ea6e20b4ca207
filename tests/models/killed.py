"""A model whose forward() gets its process killed with SIGKILL, as the kernel's
out-of-memory killer (or a cluster's memory limit) would kill it."""

import os
import signal

import torch


class Killed(torch.nn.Module):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGKILL)
        return x


ModelUnderTest = Killed()
ModelInputs = (torch.ones(1, 4),)
