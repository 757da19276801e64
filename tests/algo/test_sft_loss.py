"""SFT: masked token-mean negative log-likelihood, per micro-batch and over an optimizer step."""

from __future__ import annotations

import pytest
import torch

from rlhf.algo.aggregation import step_loss_normalizer
from rlhf.algo.supervised import sft_loss

LOGPS = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])


def test_sft_loss_is_token_mean_nll_over_the_loss_mask() -> None:
    # Single-turn style mask (response only) on row 0, one token on row 1: (2 + 3 + 4) / 3.
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert sft_loss(LOGPS, mask).item() == pytest.approx(3.0)
    assert sft_loss(LOGPS, mask, "seq_mean").item() == pytest.approx(((2 + 3) / 2 + 4) / 2)


def test_pretrain_mode_mask_counts_every_token() -> None:
    assert sft_loss(LOGPS, torch.ones(2, 3)).item() == pytest.approx(21 / 6)


def test_sft_loss_over_a_step_is_one_token_mean() -> None:
    masks = [torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]), torch.tensor([[0.0, 1.0, 0.0]])]
    logps = [LOGPS, torch.tensor([[-9.0, -10.0, -9.0]])]
    norm = step_loss_normalizer(masks)
    # The engine divides each micro-batch loss by gas = 2; the sum is NLL over all 5 tokens / 5.
    step = sum(sft_loss(lp, m, norm=norm) / 2 for lp, m in zip(logps, masks, strict=True))
    assert step.item() == pytest.approx((1 + 2 + 3 + 6 + 10) / 5)
