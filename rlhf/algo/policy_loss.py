"""Policy losses (PPO clip, dual clip, GSPO), rollout/trainer importance-sampling correction, value loss, entropy bonus.

OpenRLHF ``PolicyLoss`` and ``ValueLoss`` in ``openrlhf/models/loss.py``; the total actor loss is assembled in
``ActorPPOTrainer.training_step``: ``L_pg + kl_coef · agg(KL) [KL as loss] - entropy_coef · agg(H)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.aggregation import LossNormalizer, aggregate
from rlhf.algo.logprobs import masked_mean, masked_sum
from rlhf.algo.registry import Registry

# PPO's log-ratio is clamped before exp (OpenRLHF) so a stale token cannot overflow the ratio to inf.
LOG_RATIO_CLAMP = 20.0

#: OpenRLHF's default ``--algo.advantage.is_correction_threshold``.
DEFAULT_IS_THRESHOLD = (0.5, 5.0)


@dataclass(frozen=True)
class PolicyObjective:
    """How a policy loss forms its importance ratio.

    Attributes:
        ratio: ``(log_probs, ref_log_probs, action_mask) -> ratio[B, T]``.
        sequence_level: one ratio per sequence (GSPO). Forces ``seq_mean`` aggregation; with IS correction enabled
            the ratio is taken against the rollout log-probs and no token IS weights are applied (OpenRLHF).
    """

    ratio: Callable[[Tensor, Tensor, Tensor], Tensor]
    sequence_level: bool


POLICY_LOSSES: Registry[PolicyObjective] = Registry("policy loss")


def ppo_ratio(log_probs: Tensor, old_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Token ratio ``ρ_t = exp(clamp(log π - log π_old, -20, 20))`` (PPO, arXiv 1707.06347)."""
    return (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()


def gspo_ratio(log_probs: Tensor, ref_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Sequence ratio ``s = exp(Σ_t m_t (log π - log π_ref) / max(Σ_t m_t, 1))`` broadcast to the sequence's tokens
    (``· m``): the geometric mean of the token ratios (GSPO, arXiv 2507.18071)."""
    log_ratio = masked_sum(log_probs - ref_log_probs, action_mask, dim=-1) / action_mask.sum(dim=-1).clamp(min=1)
    return log_ratio.exp().unsqueeze(-1) * action_mask


POLICY_LOSSES.add("ppo", PolicyObjective(ratio=ppo_ratio, sequence_level=False))
POLICY_LOSSES.add("gspo", PolicyObjective(ratio=gspo_ratio, sequence_level=True))

#: ``(log_w = log π_old - log π_rollout, action_mask, low, high) -> token weights``, applied as ``L ← weight · L``.
ISCorrection = Callable[[Tensor, Tensor, float, float], Tensor]

IS_CORRECTIONS: Registry[ISCorrection] = Registry("importance-sampling correction")


@IS_CORRECTIONS.register("tis")
def tis(log_w: Tensor, action_mask: Tensor, low: float, high: float) -> Tensor:
    """Truncated IS: ``clamp(w, low, high)`` per token, ``w = exp(log π_old - log π_rollout)``."""
    return log_w.exp().clamp(low, high)


@IS_CORRECTIONS.register("icepop")
def icepop(log_w: Tensor, action_mask: Tensor, low: float, high: float) -> Tensor:
    """IcePop / masked IS: ``w · 1[low <= w <= high]`` per token (tokens outside the band get no gradient)."""
    w = log_w.exp()
    return w * ((w >= low) & (w <= high))


@IS_CORRECTIONS.register("seq_mask_tis")
def seq_mask_tis(log_w: Tensor, action_mask: Tensor, low: float, high: float) -> Tensor:
    """Sequence-masked IS: ``1[low <= s <= high] · w`` with ``s = exp(masked_mean_t log w)`` per sequence, token weight
    ``w`` left *unclamped* (OpenRLHF ``seq-mask-tis``)."""
    w = log_w.exp()
    s = masked_mean(log_w, action_mask, dim=-1).exp().unsqueeze(-1)
    return w * ((s >= low) & (s <= high))


@dataclass(frozen=True)
class PolicyLossOutput:
    """Aggregated policy loss and its metrics (masked means over this micro-batch).

    Attributes:
        loss: scalar to backpropagate.
        clip_ratio: fraction of tokens where the clip is active, ``mean(1[surr2 < surr1])``.
        ppo_kl: ``mean(log π_old - log π)``, unclamped.
        rollout_kl: ``mean(log π_rollout - log π_old)`` (OpenRLHF ``vllm_kl``), when rollout log-probs are given.
    """

    loss: Tensor
    clip_ratio: Tensor
    ppo_kl: Tensor
    rollout_kl: Tensor | None


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
    is_correction: str | None = None,
    is_threshold: tuple[float, float] = DEFAULT_IS_THRESHOLD,
    aggregation: str = "token_mean",
    norm: LossNormalizer | None = None,
) -> PolicyLossOutput:
    """Clipped surrogate policy loss (OpenRLHF ``PolicyLoss.forward``).

    ``surr1 = ρA``, ``surr2 = clamp(ρ, 1 - ε_low, 1 + ε_high) · A``, ``L = -min(surr1, surr2)``; with dual clip
    ``c > 1`` (arXiv 1912.09729) ``L = -where(A < 0, max(min(surr1, surr2), c·A), min(surr1, surr2))``. For token-level
    objectives and ``is_correction`` set, ``L ← weight · L`` with the detached weights of ``IS_CORRECTIONS[...]``
    computed from ``log π_old - log π_rollout``. Then aggregated (``seq_mean`` forced for GSPO).

    Args:
        log_probs: ``[B, T]`` current policy log-probs (with gradient).
        old_log_probs: ``[B, T]`` log-probs of the policy that made the experience, recomputed by the trainer.
        advantages: ``[B, T]``.
        action_mask: ``[B, T]``.
        loss_type: a name in ``POLICY_LOSSES``.
        clip_eps_low, clip_eps_high: clip range ``[1 - ε_low, 1 + ε_high]`` (clip-higher when ε_high > ε_low).
        dual_clip: ``c > 1`` to bound the loss of negative-advantage tokens, or ``None``.
        rollout_log_probs: ``[B, T]`` the rollout engine's log-probs (needed by ``is_correction``).
        is_correction: a name in ``IS_CORRECTIONS``, or ``None`` / ``"none"`` for no correction.
        is_threshold: ``(low, high)`` band of the IS correction.
        aggregation, norm: how the per-token loss is reduced (see :mod:`rlhf.algo.aggregation`).
    """
    objective = POLICY_LOSSES.get(loss_type)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    # The spec spells "off" as the string "none"; None works too.
    correct = None if is_correction in (None, "none") else IS_CORRECTIONS.get(is_correction)
    if correct is not None and rollout_log_probs is None:
        raise ValueError(f"IS correction {is_correction!r} needs the rollout engine's log-probs")

    # GSPO with IS correction measures its sequence ratio against the sampler itself instead of reweighting tokens.
    use_rollout_ref = objective.sequence_level and correct is not None
    ratio = objective.ratio(log_probs, rollout_log_probs if use_rollout_ref else old_log_probs, action_mask)
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
    clipped = torch.min(surr1, surr2)
    if dual_clip is not None:
        clipped = torch.where(advantages < 0, torch.max(clipped, dual_clip * advantages), clipped)
    loss = -clipped

    if correct is not None and not objective.sequence_level:
        low, high = is_threshold
        loss = correct((old_log_probs - rollout_log_probs).detach(), action_mask, low, high) * loss

    with torch.no_grad():
        clip_ratio = masked_mean((surr2 < surr1).float(), action_mask)
        ppo_kl = masked_mean(old_log_probs - log_probs, action_mask)
        rollout_kl = None if rollout_log_probs is None else masked_mean(rollout_log_probs - old_log_probs, action_mask)
    aggregated = aggregate(loss, action_mask, "seq_mean" if objective.sequence_level else aggregation, norm)
    return PolicyLossOutput(loss=aggregated, clip_ratio=clip_ratio, ppo_kl=ppo_kl, rollout_kl=rollout_kl)


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
