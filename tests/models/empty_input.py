"""A model whose example input has no elements: refused at export, naming the input."""

import torch

ModelUnderTest = torch.nn.Linear(4, 2).eval()
ModelInputs = (torch.ones(0, 4),)
