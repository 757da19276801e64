"""Policy losses (PPO clip, dual clip, GSPO, CISPO, GPG) with the rollout/trainer importance-sampling correction
(:mod:`rlhf.algo.is_correction`), value loss, entropy bonus.

OpenRLHF ``PolicyLoss`` and ``ValueLoss`` in ``openrlhf/models/loss.py``; the total actor loss is assembled in
``ActorPPOTrainer.training_step``: ``L_pg + kl_coef · agg(KL) [KL as loss] - entropy_coef · agg(H)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.aggregation import LossNormalizer, aggregate
from rlhf.algo.is_correction import ISCorrection, is_weights
from rlhf.algo.logprobs import masked_mean, masked_sum
from rlhf.algo.registry import Registry

# PPO's log-ratio is clamped before exp (OpenRLHF) so a stale token cannot overflow the ratio to inf.
LOG_RATIO_CLAMP = 20.0


#: ``(log_probs, old_log_probs, advantages, clip_eps_low, clip_eps_high) -> (loss[B, T], clipped[B, T])``: a per-token
#: loss that is not PPO's clipped surrogate, and where its clip was active.
TokenLoss = Callable[[Tensor, Tensor, Tensor, float, float], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PolicyObjective:
    """How a policy loss forms its importance ratio.

    Attributes:
        ratio: ``(log_probs, ref_log_probs, action_mask) -> ratio[B, T]``.
        sequence_level: one ratio per sequence (GSPO). Forces ``seq_mean`` aggregation; with IS correction enabled
            the ratio is taken against the rollout log-probs and no token IS weights are applied (OpenRLHF).
        token_loss: replaces PPO's ``-min(ρA, clip(ρ)A)`` (CISPO, GPG); ``None``: PPO's surrogate on ``ratio``.
    """

    ratio: Callable[[Tensor, Tensor, Tensor], Tensor]
    sequence_level: bool
    token_loss: TokenLoss | None = None


POLICY_LOSSES: Registry[PolicyObjective] = Registry("policy loss")


def ppo_ratio(log_probs: Tensor, old_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Token ratio ``ρ_t = exp(clamp(log π - log π_old, -20, 20))`` (PPO, arXiv 1707.06347)."""
    return (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()


def gspo_ratio(log_probs: Tensor, ref_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Sequence ratio ``s = exp(Σ_t m_t (log π - log π_ref) / max(Σ_t m_t, 1))`` broadcast to the sequence's tokens
    (``· m``): the geometric mean of the token ratios (GSPO, arXiv 2507.18071)."""
    log_ratio = masked_sum(log_probs - ref_log_probs, action_mask, dim=-1) / action_mask.sum(dim=-1).clamp(min=1)
    return log_ratio.exp().unsqueeze(-1) * action_mask


def cispo_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, clip_eps_low: float, clip_eps_high: float
) -> tuple[Tensor, Tensor]:
    """CISPO (MiniMax-M1, arXiv 2506.13585; veRL ``compute_policy_loss_cispo``): ``L = -sg(clip(ρ, 1 - ε_low,
    1 + ε_high)) · A · log π``. The clipped ratio is a detached weight, so a clipped token still has a gradient
    (PPO's clip removes it); ``ε_low >= 1`` leaves the ratio unbounded below."""
    ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    weight = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    return -weight.detach() * advantages * log_probs, ratio != weight


def gpg_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, clip_eps_low: float, clip_eps_high: float
) -> tuple[Tensor, Tensor]:
    """GPG (Group Policy Gradient, arXiv 2504.02546; veRL ``compute_policy_loss_gpg``): plain REINFORCE, ``L = -A ·
    log π``, no ratio and no clip (its samples are used once: one optimizer step per rollout)."""
    return -advantages * log_probs, torch.zeros_like(log_probs, dtype=torch.bool)


POLICY_LOSSES.add("ppo", PolicyObjective(ratio=ppo_ratio, sequence_level=False))
POLICY_LOSSES.add("gspo", PolicyObjective(ratio=gspo_ratio, sequence_level=True))
POLICY_LOSSES.add("cispo", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=cispo_token_loss))
POLICY_LOSSES.add("gpg", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=gpg_token_loss))


@dataclass(frozen=True)
class PolicyLossOutput:
    """Aggregated policy loss and its metrics (masked means over this micro-batch).

    Attributes:
        loss: scalar to backpropagate.
        clip_ratio: fraction of tokens where the clip is active, ``mean(1[surr2 < surr1])``.
        ppo_kl: ``mean(log π_old - log π)``, unclamped.
        rollout_kl: ``mean(log π_rollout - log π_old)`` (OpenRLHF ``vllm_kl``), when rollout log-probs are given.
        is_filter_ratio: fraction of tokens (or sequences) the IS correction's gate filtered, when it weighed the
            tokens (an enabled correction of a token-level loss).
    """

    loss: Tensor
    clip_ratio: Tensor
    ppo_kl: Tensor
    rollout_kl: Tensor | None
    is_filter_ratio: Tensor | None = None


def policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    action_mask: Tensor,
    *,
    loss_type: str = "ppo",
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    dual_clip: float | None = None,
    rollout_log_probs: Tensor | None = None,
    is_correction: ISCorrection | None = None,
    aggregation: str = "token_mean",
    norm: LossNormalizer | None = None,
) -> PolicyLossOutput:
    """Clipped surrogate policy loss (OpenRLHF ``PolicyLoss.forward``).

    ``surr1 = ρA``, ``surr2 = clamp(ρ, 1 - ε_low, 1 + ε_high) · A``, ``L = -min(surr1, surr2)``; with dual clip
    ``c > 1`` (arXiv 1912.09729) ``L = -where(A < 0, max(min(surr1, surr2), c·A), min(surr1, surr2))``. For token-level
    objectives and an enabled ``is_correction``, ``L ← coef · L`` with the detached coefficients of
    :func:`rlhf.algo.is_correction.is_weights` (from ``log π_old`` and ``log π_rollout``). Then aggregated
    (``seq_mean`` forced for GSPO).

    Args:
        log_probs: ``[B, T]`` current policy log-probs (with gradient).
        old_log_probs: ``[B, T]`` log-probs of the policy that made the experience, recomputed by the trainer.
        advantages: ``[B, T]``.
        action_mask: ``[B, T]``.
        loss_type: a name in ``POLICY_LOSSES``.
        clip_eps_low, clip_eps_high: clip range ``[1 - ε_low, 1 + ε_high]`` (clip-higher when ε_high > ε_low).
        dual_clip: ``c > 1`` to bound the loss of negative-advantage tokens, or ``None``.
        rollout_log_probs: ``[B, T]`` the rollout engine's log-probs (needed by ``is_correction``).
        is_correction: the correction (level, mode, gating, band); ``None`` or level ``off``: none.
        aggregation, norm: how the per-token loss is reduced (see :mod:`rlhf.algo.aggregation`; OpenRLHF's
            ``loss_agg_mode`` names are accepted).
    """
    objective = POLICY_LOSSES.get(loss_type)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if dual_clip is not None and objective.token_loss is not None:
        raise ValueError(f"{loss_type} has no dual clip (it bounds PPO's surrogate): set dual_clip to None")
    correct = is_correction is not None and is_correction.enabled
    if correct and rollout_log_probs is None:
        raise ValueError(f"IS correction {is_correction} needs the rollout engine's log-probs")

    # GSPO with IS correction measures its sequence ratio against the sampler itself instead of reweighting tokens.
    use_rollout_ref = objective.sequence_level and correct
    if objective.token_loss is not None:
        loss, clip_active = objective.token_loss(log_probs, old_log_probs, advantages, clip_eps_low, clip_eps_high)
    else:
        ratio = objective.ratio(log_probs, rollout_log_probs if use_rollout_ref else old_log_probs, action_mask)
        surr1 = ratio * advantages
        surr2 = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
        clipped = torch.min(surr1, surr2)
        if dual_clip is not None:
            clipped = torch.where(advantages < 0, torch.max(clipped, dual_clip * advantages), clipped)
        loss = -clipped
        clip_active = surr2 < surr1

    is_filter_ratio = None
    if correct and not objective.sequence_level:
        weights = is_weights(old_log_probs, rollout_log_probs, action_mask, is_correction)
        loss = weights.coef * loss
        is_filter_ratio = weights.filter_ratio

    with torch.no_grad():
        clip_ratio = masked_mean(clip_active.float(), action_mask)
        ppo_kl = masked_mean(old_log_probs - log_probs, action_mask)
        rollout_kl = None if rollout_log_probs is None else masked_mean(rollout_log_probs - old_log_probs, action_mask)
    aggregated = aggregate(loss, action_mask, "seq_mean" if objective.sequence_level else aggregation, norm)
    return PolicyLossOutput(aggregated, clip_ratio, ppo_kl, rollout_kl, is_filter_ratio)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    action_mask: Tensor,
    *,
    clip_eps: float | None = 0.5,
    aggregation: str = "token_mean",
    norm: LossNormalizer | None = None,
) -> Tensor:
    """Clipped critic loss (OpenRLHF ``ValueLoss``, default ``--critic.value_clip 0.5``):

    ``V_clip = V_old + clamp(V - V_old, -c, c)``; ``L = 0.5 · agg(max((V_clip - G)², (V - G)²))``, or
    ``0.5 · agg((V - G)²)`` when ``clip_eps`` is ``None``.
    """
    loss = (values - returns).pow(2)
    if clip_eps is not None:
        clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        loss = torch.max((clipped - returns).pow(2), loss)
    return 0.5 * aggregate(loss, action_mask, aggregation, norm)


def entropy_bonus(
    entropy: Tensor,
    action_mask: Tensor,
    entropy_coef: float,
    aggregation: str = "token_mean",
    norm: LossNormalizer | None = None,
) -> Tensor:
    """The entropy term added to the actor loss: ``-entropy_coef · agg(H)`` (maximising entropy when coef > 0)."""
    return -entropy_coef * aggregate(entropy, action_mask, aggregation, norm)
