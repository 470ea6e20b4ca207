import torch

ModelUnderTest = torch.nn.ReLU()
