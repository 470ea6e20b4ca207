import torch

ModelUnderTest = torch.nn.ReLU(
ModelInputs = (torch.zeros(1, 4),)
