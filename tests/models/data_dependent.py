"""A model torch.export cannot trace: Python control flow on tensor values."""

import torch


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


ModelUnderTest = DataDependent()
ModelInputs = (torch.ones(1, 4),)
