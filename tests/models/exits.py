"""A model file that ends its Python process at import (`sys.exit(3)`), as a script written to be
run by hand might: the model's own failure, recorded, naming the file and the code."""

import sys

import torch

sys.exit(3)

ModelUnderTest = torch.nn.Identity()
ModelInputs = (torch.ones(1, 4),)
