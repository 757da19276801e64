"""Helpers shared by the algo tests: random tensors and masks from a hypothesis-drawn seed."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

seeds = st.integers(min_value=0, max_value=2**31 - 1)


def random_mask(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """A [batch, length] 0/1 float mask with at least one 1 per row (first token) and random holes and padding."""
    mask = (torch.rand(batch, length, generator=generator) < 0.7).float()
    mask[:, 0] = 1.0
    return mask


def garble(values: torch.Tensor, mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``values`` with every masked-out (mask == 0) entry replaced by finite garbage."""
    garbage = torch.randn(values.shape, generator=generator) * 7.0 + 3.0
    return torch.where(mask.bool(), values, garbage)
