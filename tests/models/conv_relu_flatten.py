"""A keyword spotter's front end: a convolution and ReLU over MFCC frames, then time first and the
channels flattened for what follows (ethosweep.zoo.deployable.RecurrentKWS
without its recurrence). With int16 activations ExecuTorch moves the ReLU after the permute and the
flatten: its result is in the TOSA only in that layout."""

import torch
from torch import nn


class ConvReluFlatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, (10, 4), stride=(2, 1), padding=(4, 0)), nn.ReLU())
        self.classifier = nn.Linear(8 * 7, 4)

    def forward(self, mfcc):
        features = self.conv(mfcc).permute(0, 2, 1, 3).flatten(2)  # [1, 24, 56]
        return self.classifier(features).mean(dim=1)


torch.manual_seed(0)
ModelUnderTest = ConvReluFlatten().eval()
ModelInputs = (torch.rand(1, 1, 49, 10) * 2 - 1,)
