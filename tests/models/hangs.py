"""A model whose forward() never returns (a hang): only the job's wall-clock limit ends it."""

import time

import torch


class Hangs(torch.nn.Module):
    def forward(self, x):
        while True:
            time.sleep(1)


ModelUnderTest = Hangs()
ModelInputs = (torch.ones(1, 4),)
