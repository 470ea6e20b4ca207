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


def random_inputs_like(example_inputs: tuple, count: int, seed: int) -> list[tuple]:
    """`count` input tuples like `example_inputs` (random_like each tensor), drawn in order from one
    generator seeded with `seed`."""
    generator = torch.Generator().manual_seed(seed)
    return [tuple(random_like(t, generator) for t in example_inputs) for _ in range(count)]
