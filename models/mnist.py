"""The seeds' MNIST CNN (seed 000: Alif Ensemble E8, Ethos-U55-128).

Two 3x3 conv + ReLU + 2x2 max-pool blocks and two fully connected layers:
1,135,872 MACs as Vela counts them (pooling included), for 1x1x28x28 inputs.

Follows aot_arm_compiler's model-file convention (ModelUnderTest, ModelInputs),
so the same file also works with
`python -m executorch.backends.arm.scripts.aot_arm_compiler --model_name=models/mnist.py`.
Unlike the seed, it seeds torch before drawing its random weights: Vela's cycle
counts depend on weight values, so unseeded weights give different cycles in
every run.
"""

import torch
from torch import nn

torch.manual_seed(0)


class MNISTModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=1, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, stride=1, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(self.relu3(self.fc1(x)))


ModelUnderTest = MNISTModel().eval()
ModelInputs = (torch.rand(1, 1, 28, 28),)
