"""A classifier over 1000 classes with seeded random weights (declared `classifier: true`), whose
logits are nearly flat: a common offset (the bias) sets the output's quantization range, which
always includes 0, and the classes differ by far less than one step of it. Top-1 agreement with
float cannot mean anything then; random-weight networks with BatchNorm behave alike."""

import torch

torch.manual_seed(0)


class FlatClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 1000)
        with torch.no_grad():
            self.fc.weight.uniform_(-1e-3, 1e-3)
            self.fc.bias.fill_(5.0)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


ModelUnderTest = FlatClassifier().eval()
ModelInputs = (torch.rand(1, 3, 16, 16),)
