"""What the verify stage is given, as three values (ethosweep.runtime.binding builds each from the
job's items named as its fields): the files it reads and writes, the other TOSA profile's
verification it may take, and the numerics settings. Torch-free."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ethosweep.verify.tolerances import EXECUTORCH_COSINE, EXECUTORCH_FROBENIUS, EXECUTORCH_QTOL, Thresholds


@dataclass(frozen=True)
class VerifyFiles:
    program: str  # the exported float program
    quantized: str
    inputs: str  # the example inputs
    edge: str  # the lowered edge program: its partitions run on the TOSA reference model
    lower_meta: str
    tosa_sources: str
    report: str  # written: verify.json
    bundle_io: str  # written: inputs and expected outputs for the BundleIO program
    quantize_meta: str | None = None  # both only where another profile's verification may be taken
    delegation: str | None = None
    repro: str | None = None  # where a crash of the reference model leaves its reproducer


# The key of a verification record that is another profile's: that record's path (relative to the
# results folder's parent, as the jobs see it)
SAME_AS_REPORT = "same_as_report"


@dataclass(frozen=True)
class OtherVerification:
    """The other profile's lowering (read) and where its verification will be (written by its own
    job, maybe later): the rule's `same_as_*` items."""

    prefix: ClassVar[str] = "same_as_"
    report: str | None = None
    bundle_io: str | None = None
    lower_meta: str | None = None
    tosa_sources: str | None = None
    delegation: str | None = None

    def given(self) -> bool:
        """All or none: the workflow gives them together."""
        return all(dataclasses.astuple(self))


@dataclass(frozen=True)
class NumericsSettings:
    """A model's data and the `numerics` config (config/README.md), as the verify rules give them."""

    dataset: Any = None
    classifier: bool | None = None
    seed: int = 0
    evaluation_samples: int = 500
    random_samples: int = 40
    min_agreement: float = 0.99
    max_error_steps: float = EXECUTORCH_QTOL
    min_cosine: float = EXECUTORCH_COSINE
    max_relative_error: float = EXECUTORCH_FROBENIUS
    bundle_samples: int = 4
    max_error_steps_int16: dict | None = None

    def thresholds(self) -> Thresholds:
        return Thresholds(
            max_error_steps=self.max_error_steps,
            min_agreement=self.min_agreement,
            min_cosine=self.min_cosine,
            max_relative_error=self.max_relative_error,
            max_error_steps_int16=dict(self.max_error_steps_int16 or {}),
        )
