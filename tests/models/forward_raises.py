import torch


class Broken(torch.nn.Module):
    def forward(self, x):
        return torch.matmul(x, torch.ones(3, 3))  # shape mismatch for (1, 4)


ModelUnderTest = Broken()
ModelInputs = (torch.ones(1, 4),)
