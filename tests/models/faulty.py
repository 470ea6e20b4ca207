"""A small CNN that does a fault on demand (tests/faults.py): in its forward() or while its file is
imported, as ETHOSWEEP_TEST_FAULT_AT says ("forward", the default, or "import")."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for faults.py
import faults  # noqa: E402

torch.manual_seed(0)
if os.environ.get("ETHOSWEEP_TEST_FAULT_AT") == "import":
    faults.inject()


class Faulty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        if os.environ.get("ETHOSWEEP_TEST_FAULT_AT", "forward") == "forward":
            faults.inject()
        return self.fc(torch.relu(self.conv(x)).flatten(1))


ModelUnderTest = Faulty().eval()
ModelInputs = (torch.rand(1, 1, 6, 6),)
