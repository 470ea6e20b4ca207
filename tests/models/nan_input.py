"""A model whose example input holds NaN: refused at export, naming the input."""

import torch

ModelUnderTest = torch.nn.Linear(4, 2).eval()
ModelInputs = (torch.tensor([[1.0, float("nan"), 0.0, 2.0]]),)
