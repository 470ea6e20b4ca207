"""A model file that kills its own process at import without unwinding (`os._exit(3)`, what a native
extension's fatal error does): the job's process ends without a result, is tried again in a fresh
one, and the second time it is the model's, recorded, naming the file."""

import os

import torch

os._exit(3)

ModelUnderTest = torch.nn.Identity()
ModelInputs = (torch.ones(1, 4),)
