"""KL estimators, KL placement (folded into the reward, or a loss term) and KL coefficient controllers.

OpenRLHF: ``compute_approx_kl`` and ``compute_reward`` in ``openrlhf/models/utils.py``, controllers in
``openrlhf/trainer/ppo_utils/kl_controller.py``. Estimators follow http://joschu.net/blog/kl-approx.html.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from rlhf.algo.aggregation import LossNormalizer, aggregate
from rlhf.algo.registry import Registry

#: Every estimate is clamped to [-KL_CLAMP, KL_CLAMP] (OpenRLHF), so one wild token cannot dominate reward or loss.
KL_CLAMP = 10.0

#: The reward clip range OpenRLHF applies by default (``--reward.clip_range``, always on).
DEFAULT_REWARD_CLIP = (-10.0, 10.0)

#: Upper bound of the importance weight ``w = π_θ / π_old`` of the unbiased KL gradient (OpenRLHF
#: ``KL_IS_WEIGHT_CLIP``): the weight is unbounded off-policy and would let one stale token dominate.
KL_IS_WEIGHT_CLIP = 10.0

KL_ESTIMATORS: Registry[Callable[[Tensor], Tensor]] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def k1(log_ratio: Tensor) -> Tensor:
    """``k1 = δ`` with ``δ = log π - log π_ref``: unbiased, high variance, can be negative per token."""
    return log_ratio


@KL_ESTIMATORS.register("k2")
def k2(log_ratio: Tensor) -> Tensor:
    """``k2 = δ² / 2``: non-negative, biased; its gradient is that of the true KL to first order (for use as a loss)."""
    return log_ratio.pow(2) / 2.0


@KL_ESTIMATORS.register("k3")
def k3(log_ratio: Tensor) -> Tensor:
    """``k3 = exp(-δ) - 1 + δ``: non-negative and unbiased for KL(π || π_ref) under samples from π.

    δ is bounded below at -10 before the exp (OpenRLHF 0.11.2): k3 there already exceeds the final clamp, and an
    unbounded ``exp(-δ)`` overflows to inf in fp32, whose derivative times the clamp's zero is NaN."""
    log_ratio = log_ratio.clamp(min=-KL_CLAMP)
    return torch.exp(-log_ratio) - 1.0 + log_ratio


@KL_ESTIMATORS.register("abs")
def abs_kl(log_ratio: Tensor) -> Tensor:
    """``|δ|`` (veRL's ``abs``): non-negative, biased; its gradient pushes ``log π`` toward ``log π_ref`` with the same
    force whatever the distance. Clamped at 10 here like the others (veRL does not clamp it)."""
    return log_ratio.abs()


def compute_approx_kl(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    estimator: str = "k1",
    *,
    old_log_probs: Tensor | None = None,
    unbiased_gradient: bool = False,
    clamp_k3_only: bool = False,
) -> Tensor:
    """Per-token KL estimate ``clamp(k(log π - log π_ref), -10, 10)``, in fp32 (OpenRLHF ``compute_approx_kl``);
    ``clamp_k3_only`` leaves k1, k2 and abs unbounded (veRL ``kl_penalty``, which clamps k3 alone).

    ``unbiased_gradient`` (OpenRLHF 0.11.2, for the KL used as a loss): the value stays the estimator's, but the
    gradient is the true reverse-KL gradient ``E_{π_old}[w · δ · ∇log π]`` whatever the estimator, through the
    straight-through surrogate ``w · δ² / 2`` with ``w = min(exp(log π - log π_old), 10)`` detached (``w = 1``
    without ``old_log_probs``): ``value.detach() + s - s.detach()``. k2's pathwise gradient ``δ · ∇log π`` is the
    score-function form, and ``w`` corrects it for the off-policy epochs. With ``unbiased_gradient`` and no
    ``old_log_probs`` (``w = 1``) this is veRL's straight-through ``'+'`` estimators (``k1+``, ``k3+``).
    """
    log_ratio = log_probs.float() - ref_log_probs.float()
    value = KL_ESTIMATORS.get(estimator)(log_ratio)
    if estimator == "k3" or not clamp_k3_only:
        value = value.clamp(-KL_CLAMP, KL_CLAMP)
    if not unbiased_gradient:
        return value
    if old_log_probs is None:
        w: Tensor | float = 1.0
    else:
        w = (log_probs.float() - old_log_probs.float()).exp().clamp(max=KL_IS_WEIGHT_CLIP).detach()
    surrogate = w * log_ratio.pow(2) / 2.0
    return value.detach() + surrogate - surrogate.detach()


def compute_reward(
    r: Tensor,
    kl_coef: float,
    kl: Tensor | None,
    action_mask: Tensor,
    reward_clip_range: tuple[float, float] | None = DEFAULT_REWARD_CLIP,
) -> Tensor:
    """Per-token rewards with the KL penalty folded in (OpenRLHF ``compute_reward``, the default KL placement):

    ``reward_t = -max(kl_coef, 0) · kl_t + clamp(r, lo, hi) · 1[t == last action token]``.

    ``r`` is the scalar reward per sample *after* any group baseline, so the clip also acts on group-normalised
    rewards, as in OpenRLHF. The KL term is multiplied by the action mask (OpenRLHF leaves ``-kl_coef · kl`` on
    padding, which only its logged ``return`` sees: every return and advantage masks the rewards first).

    Args:
        r: ``[B]`` scalar rewards.
        kl_coef: KL coefficient; negative values count as 0.
        kl: ``[B, T]`` per-token KL, or ``None`` when there is no reference model.
        action_mask: ``[B, T]``.
        reward_clip_range: ``(lo, hi)``, or ``None`` for no clip.
    """
    kl_coef = max(kl_coef, 0.0)
    if reward_clip_range is not None:
        r = r.clamp(min=reward_clip_range[0], max=reward_clip_range[1])
    mask = action_mask.long()
    # Index of the last 1 in each row: T-1 - (position of the first 1 in the flipped row).
    last = mask.size(1) - 1 - mask.fliplr().argmax(dim=1, keepdim=True)
    dtype = torch.float32 if kl is None else kl.dtype
    rewards = torch.zeros(mask.shape, dtype=dtype, device=mask.device).scatter_(1, last, r.unsqueeze(1).to(dtype))
    if kl is None:
        return rewards
    return rewards - kl_coef * kl * action_mask


def kl_loss(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    action_mask: Tensor,
    kl_coef: float,
    estimator: str,
    aggregation: str = "token_mean",
    norm: LossNormalizer | None = None,
    *,
    old_log_probs: Tensor | None = None,
    unbiased_gradient: bool = False,
    straight_through: bool = False,
    clamp_k3_only: bool = False,
) -> Tensor:
    """The KL-in-loss term ``kl_coef · agg(KL(π_θ || π_ref))`` of the *current* policy (OpenRLHF ``--algo.kl.use_loss``,
    in ``ActorPPOTrainer.training_step``, which aggregates it by token mean whatever the policy loss's aggregation).

    The estimator has no default: OpenRLHF's global default ``k1`` makes a poor loss (its gradient is not that of the
    KL, and OpenRLHF warns about it), so the caller picks, usually k2 or k3; with ``unbiased_gradient`` every
    estimator has the true KL gradient (see :func:`compute_approx_kl`, ``old_log_probs`` the policy that sampled);
    ``straight_through`` gives it k2's gradient without the weight (veRL's ``'+'`` estimators)."""
    kl = compute_approx_kl(
        log_probs,
        ref_log_probs,
        estimator,
        old_log_probs=None if straight_through else old_log_probs,
        unbiased_gradient=unbiased_gradient or straight_through,
        clamp_k3_only=clamp_k3_only,
    )
    return kl_coef * aggregate(kl, action_mask, aggregation, norm)


def controller_kl(kl: Tensor, action_mask: Tensor, how: str = "token_mean") -> float:
    """The step's KL the adaptive controller reads: ``token_mean``, ``Σ kl·m / Σ m`` over the batch (OpenRLHF), or
    ``seq_mean``, the mean over sequences of ``Σ_t kl·m / (Σ_t m + 1e-8)`` (veRL ``apply_kl_penalty``)."""
    if how == "seq_mean":
        per_sequence = (kl * action_mask).sum(dim=-1) / (action_mask.sum(dim=-1) + 1e-8)
        return float(per_sequence.mean())
    if how != "token_mean":
        raise ValueError(f"unknown controller KL {how!r}; valid: token_mean, seq_mean")
    return float((kl * action_mask).sum() / action_mask.sum())


class KLController(Protocol):
    """Holds the current KL coefficient; ``update`` is called once per training step."""

    value: float

    def update(self, current: float, n_steps: int) -> None: ...


class FixedKLController:
    """A constant KL coefficient (OpenRLHF ``FixedKLController``, the default)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. (arXiv 1909.08593), OpenRLHF ``AdaptiveKLController``:

    ``e = clip(current / target - 1, -0.2, 0.2)``; ``β ← β · (1 + e · n_steps / horizon)``.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target and horizon must be > 0, got target={target}, horizon={horizon}")
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current: float, n_steps: int) -> None:
        """Move β towards the coefficient that keeps the measured KL ``current`` near ``target``."""
        error = min(max(current / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(init_coef: float, target: float | None = None, horizon: float = 10000) -> KLController:
    """Fixed controller when ``target`` is ``None`` (OpenRLHF default), adaptive otherwise."""
    if target is None:
        return FixedKLController(init_coef)
    return AdaptiveKLController(init_coef, target, horizon)
