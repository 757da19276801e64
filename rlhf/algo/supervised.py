"""Supervised fine-tuning loss (OpenRLHF ``SFTLoss`` in ``openrlhf/models/loss.py``).

Single-turn, multi-turn and pretrain modes differ only in the loss mask the data layer builds (response tokens,
every assistant turn, or all tokens); the loss is the same masked negative log-likelihood.
"""

from __future__ import annotations

from torch import Tensor

from rlhf.algo.aggregation import LossNormalizer, aggregate


def sft_loss(
    token_log_probs: Tensor, loss_mask: Tensor, aggregation: str = "token_mean", norm: LossNormalizer | None = None
) -> Tensor:
    """``agg(-log p(y_t), loss_mask)``: with OpenRLHF's default ``token_mean`` and a step normaliser
    (:func:`rlhf.algo.aggregation.step_loss_normalizer`), one token mean over the whole optimizer step."""
    return aggregate(-token_log_probs, loss_mask, aggregation, norm)
