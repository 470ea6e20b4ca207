"""What the verdicts allow: ExecuTorch's own Arm test tolerances (output steps per operator, its
model checks' cosine and relative error) and the error energy the NPU path may add, as `Thresholds`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# ExecuTorch's Arm test pipeline's defaults (backends/arm/test/tester/test_pipeline.py: the
# Ethos-U pipelines compare with qtol=1, atol=1e-3, rtol=1e-3; TosaPipelineINT's model checks).
EXECUTORCH_QTOL = 1
EXECUTORCH_COSINE = 0.9
EXECUTORCH_FROBENIUS = 0.15
# int16 steps allowed per operator kind, from ExecuTorch's a16w8 operator tests (backends/arm/test/ops).
# Their comparison accepts atol + qtol * scale + rtol * |reference| per value
# (tester/analyze_output_utils.py), so where a test sets no qtol of its own, its atol and rtol are
# counted in int16 steps of the test's output range; where it does, its qtol is taken as written.
# "default" is every other operator (conv, linear, add, mul: qtol=1, their atol scale-dependent).
EXECUTORCH_INT16_QTOL = {
    "default": 1,
    "layer_norm": 400,  # test_layer_norm: qtol=400
    "gelu": 128,  # test_gelu a16w8: qtol=128
    "exp": 128,  # test_exp a16w8: qtol=128
    "rsqrt": 128,  # test_rsqrt a16w8: qtol=128
    "reciprocal": 128,  # test_reciprocal a16w8: qtol=128
    "sum": 128,  # test_sum a16w8: qtol=128
    # test_softmax's a16w8 attention test: atol=0.003 on a [0, 1] output, 0.003 * 32767 = 98 steps
    "softmax": 100,
    # test_mean_dim a16w8: default qtol=1 with atol=rtol=1e-3 on means of [0, 1) inputs:
    # (1e-3 + 1e-3 * 0.5) * 32767 + 1 = 50 steps
    "mean": 50,
    # test_sigmoid 16a8w: default qtol=1, atol=rtol=1e-3 on a [0, 1] output: 2e-3 * 32767 + 1 = 67
    "sigmoid": 67,
    # test_tanh 16a8w: rtol=2e-3 with atol=1e-3 on a [-1, 1] output: 3e-3 * 32767 + 1 = 99
    "tanh": 99,
    # no a16w8 test upstream: judged as the table lookups it is made of (exp, log), 128
    "log_softmax": 128,
}
# A layer this many times its tolerance off, and at least this many int8 steps (int16 steps / 256)
# off given the NPU's own inputs, computes something else, whatever the output shows. The largest
# tolerance any ExecuTorch operator test gives is 400 int16 steps, 1.6 int8 steps; 8 int8 steps is
# 3 % of an int8 range, 5x that. The lowering errors the tests reproduce (a negated weight, a
# transposed layout) are 10-64 steps and more.
GROSS_FACTOR = 8
GROSS_FLOOR_INT8_STEPS = 8


@dataclass(frozen=True)
class Thresholds:
    max_error_steps: float = EXECUTORCH_QTOL
    min_agreement: float = 0.99
    min_cosine: float = EXECUTORCH_COSINE
    max_relative_error: float = EXECUTORCH_FROBENIUS
    max_error_steps_int16: dict = field(default_factory=lambda: dict(EXECUTORCH_INT16_QTOL), hash=False)

    def steps_allowed(self, bits: int, kind: str = "") -> float:
        """What a tensor of this width, computed by this kind of operator, may differ by, in its own steps."""
        if bits != 16:
            return self.max_error_steps
        table = {**EXECUTORCH_INT16_QTOL, **(self.max_error_steps_int16 or {})}
        return table.get(kind.lstrip("_"), table["default"])

    def samples_to_draw(self) -> int:
        """Random inputs for a classifier without data: enough that, if none disagrees, the
        Clopper-Pearson interval shows the agreement within min_agreement (368 at 0.99)."""
        if self.min_agreement >= 1:
            return 1_000_000
        return math.ceil(math.log(0.025) / math.log(self.min_agreement))


# The NPU path may add as much error energy against float as quantization already leaves (a ratio of
# 2, 3.01 dB), on a typical input, each input's energies counted from the energy ExecuTorch's output
# tolerance allows (its qtol steps at every value): a difference at rounding level is none.
ENERGY_TOLERANCE_DB = 10 * math.log10(2)
