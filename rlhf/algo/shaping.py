"""Reward shaping applied before advantages: length penalties, dynamic filtering, reward normalisation.

OpenRLHF ``openrlhf/trainer/ppo_utils/length_penalty.py`` (penalties), ``SamplesGenerator._generate_vllm`` (dynamic
filtering) and the reward model's ``(r - mean) / std`` under ``--reward.normalize_enable``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: OpenRLHF's default ``--algo.dynamic_filtering_range``: drops all-0 and all-1 groups of a 0/1 verifier.
DEFAULT_FILTER_RANGE = (0.0, 1.0)


def overlong_penalty(
    rewards: Tensor, response_lengths: Tensor, max_new_tokens: int, buffer_len: int, penalty_factor: float = 1.0
) -> Tensor:
    """DAPO overlong reward shaping (OpenRLHF ``apply_overlong_penalty``), returning new rewards:

    ``expected = max_new_tokens - L_buf``; ``exceed = min(len - expected, L_buf)``;
    ``r += -exceed / L_buf · factor`` where ``exceed > 0``. The penalty ramps linearly from 0 to ``-factor`` over the
    last ``L_buf`` tokens of the generation budget.
    """
    if not 0 < buffer_len <= max_new_tokens:
        raise ValueError(f"need 0 < overlong buffer_len ({buffer_len}) <= max_new_tokens ({max_new_tokens})")
    exceed = (response_lengths.to(rewards.dtype) - (max_new_tokens - buffer_len)).clamp(max=buffer_len)
    return rewards + torch.where(exceed > 0, -exceed / buffer_len * penalty_factor, torch.zeros_like(exceed))


def stop_properly_penalty(rewards: Tensor, truncated: Tensor, coef: float) -> Tensor:
    """ProRL penalty for samples that hit the length limit (OpenRLHF ``apply_stop_properly_penalty``):

    where ``truncated`` (finish reason "length"): ``r · coef`` if ``coef >= 0`` (``coef`` in [0, 1]), else ``r = coef``.
    """
    if coef > 1:
        raise ValueError(f"stop-properly penalty coef must be <= 1, got {coef}")
    penalised = rewards * coef if coef >= 0 else torch.full_like(rewards, coef)
    return torch.where(truncated.bool(), penalised, rewards)


def keep_group(scores: Sequence[float] | Tensor, score_range: tuple[float, float] = DEFAULT_FILTER_RANGE) -> bool:
    """DAPO dynamic-sampling predicate for one prompt's group: keep iff ``lo < mean(scores) < hi`` (strict).

    A group whose samples all score the same has zero advantage under every group baseline, so it only costs compute.
    """
    lo, hi = score_range
    mean = float(torch.as_tensor(scores, dtype=torch.float64).mean())
    return lo < mean < hi


def normalize_rewards(rewards: Tensor, mean: float | Tensor, std: float | Tensor) -> Tensor:
    """``(r - mean) / std`` with the statistics a reward model stored when it was trained
    (OpenRLHF ``--reward.normalize_enable``)."""
    return (rewards - mean) / std
