"""Rollout rejection sampling: the tokens or whole sequences whose divergence between the rollout engine's and the
trainer's log-probs leaves a bound are taken out of the loss (their action mask set to 0) before the advantages are
computed, a hard trust region where the IS correction (:mod:`rlhf.algo.is_correction`) reweighs.

veRL 0.9.1 ``algorithm.rollout_correction.rollout_rs`` / ``rollout_rs_threshold``
(``rollout_corr_helper.compute_rollout_rejection_mask``). With ``log r = log pi_train - log pi_rollout`` (clamped to
``[-20, 20]``) each criterion ``<level>_<estimator>`` reads one estimator per token, ``k1 = -log r``,
``k2 = (log r)^2 / 2``, ``k3 = exp(log r) - 1 - log r``, at one level: the token itself (``token_*``), or its
sequence's sum, mean or maximum over the action tokens (``seq_sum_*``, ``seq_mean_*``, ``seq_max_*``: the whole
sequence is kept or rejected). ``k1`` is a log-ratio, kept inside ``[log lower, log upper]`` (``lower``: ``1/upper``
unless given); the others are divergences, kept at most ``upper``. A token stays when every criterion keeps it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.spec.names import REJECTION_CRITERIA

#: veRL's SAFETY_BOUND: the log-ratio is clamped to +-20 before the estimators.
LOG_RATIO_BOUND = 20.0


@dataclass(frozen=True)
class Rejection:
    """Criteria (``REJECTION_CRITERIA``) with one ``upper`` bound each and, for the ``k1`` ones, a ``lower`` bound
    (``None``: ``1 / upper``)."""

    criteria: tuple[str, ...]
    upper: tuple[float, ...]
    lower: tuple[float | None, ...]

    def __post_init__(self) -> None:
        if not (len(self.criteria) == len(self.upper) == len(self.lower)):
            raise ValueError("one upper and one lower bound per rejection criterion")
        for name, up, low in zip(self.criteria, self.upper, self.lower, strict=True):
            if name not in REJECTION_CRITERIA:
                raise ValueError(f"rejection criterion {name!r}; valid: {', '.join(REJECTION_CRITERIA)}")
            if up <= 0 or (low is not None and not 0 < low <= up):
                raise ValueError(f"{name}: bounds must be positive with lower <= upper, got {low}, {up}")
            if low is not None and not name.endswith("k1"):
                raise ValueError(f"{name}: only the k1 criteria (a log-ratio) take a lower bound")

    @classmethod
    def of(cls, criteria: list[str], upper: list[float], lower: list[float]) -> Rejection:
        """From the config's lists: one bound shared by every criterion, or one each (as veRL's threshold string);
        ``lower`` applies to the k1 criteria only (empty: ``1 / upper``)."""
        n = len(criteria)
        ups = list(upper) * n if len(upper) == 1 else list(upper)
        lows: list[float | None] = list(lower) * n if len(lower) == 1 else list(lower) or [None] * n
        lows = [low if c.endswith("k1") else None for c, low in zip(criteria, lows, strict=True)]
        return cls(tuple(criteria), tuple(float(u) for u in ups), tuple(lows))


def _seq_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum(-1) / (mask.sum(-1) + 1e-8)  # veRL's masked_mean along a row


def _mean(x: Tensor, mask: Tensor) -> float:
    return float((x * mask).sum() / (mask.sum() + 1e-8))


def rejection_keep(
    old_logprobs: Tensor, rollout_logprobs: Tensor, action_mask: Tensor, rejection: Rejection
) -> tuple[Tensor, dict[str, float]]:
    """``[B, T]`` 1 for the action tokens every criterion keeps (0 elsewhere, padding included), and veRL's metrics
    under its names: the fraction of action tokens rejected and of sequences with a rejected token, overall and per
    criterion (``rollout_corr/rollout_rs_[<criterion>_]masked_fraction``, ``..._seq_masked_fraction``)."""
    mask = action_mask.to(old_logprobs.dtype)
    valid = mask > 0
    log_ratio = (old_logprobs - rollout_logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    estimators = {
        "k1": -log_ratio,
        "k2": 0.5 * log_ratio.square(),
        "k3": torch.exp(log_ratio) - 1.0 - log_ratio,
    }
    has_tokens = valid.any(-1)
    keep = torch.ones_like(mask)
    metrics: dict[str, float] = {}
    for name, up, low in zip(rejection.criteria, rejection.upper, rejection.lower, strict=True):
        level, estimator = name.rsplit("_", 1)
        stat = estimators[estimator]
        if level == "seq_sum":
            stat = (stat * mask).sum(-1, keepdim=True)
        elif level == "seq_mean":
            stat = _seq_mean(stat, mask).unsqueeze(-1)
        elif level == "seq_max":
            top = stat.masked_fill(~valid, float("-inf")).max(-1, keepdim=True).values
            stat = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        if estimator == "k1":
            lower = low if low is not None else 1.0 / up
            ok = (stat >= math.log(lower)) & (stat <= math.log(up))
        else:
            ok = stat <= up
        ok = ok.expand_as(mask).to(mask.dtype)
        keep = keep * ok
        rejected = (ok < 0.5) & valid
        metrics[f"rollout_corr/rollout_rs_{name}_masked_fraction"] = _mean(1 - ok, mask)
        seqs = float(has_tokens.sum())
        metrics[f"rollout_corr/rollout_rs_{name}_seq_masked_fraction"] = (
            float((rejected.any(-1) & has_tokens).sum()) / seqs if seqs else 0.0
        )
    metrics["rollout_corr/rollout_rs_masked_fraction"] = _mean(1 - keep, mask)
    metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = float(((keep < 0.5) & valid).any(-1).float().mean())
    return keep * mask, metrics
