"""Random inputs like a model's example inputs: uniform in their value range, seeded by the caller.

Shared by the stages that draw them (export, for BatchNorm statistics; quantize and verify, for a
model without real data), in a module of its own so that none of them depends on another's code.
"""

from __future__ import annotations

import torch


def random_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A tensor of `t`'s shape and dtype, uniform in [t.min(), t.max()) (integers: `t` itself)."""
    if not t.dtype.is_floating_point:
        return t.clone()
    low, high = float(t.min()), float(t.max())
    return (torch.rand(t.shape, generator=generator) * (high - low) + low).to(t.dtype)
