"""veRL 0.9.1's actor metrics ``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower`` and ``actor/ppo_kl``, as each of its
policy-loss functions (``verl/trainer/ppo/core_algos.py``) defines them for one micro-batch (``logging.verl_metrics``).

Ours, ``ppo_clip_ratio`` and ``ppo_kl`` (:class:`rlhf.algo.policy_loss.PolicyLossOutput`), mean the same for every
loss: the share of tokens where the loss's clip is active, and ``mean(log π_old - log π)``. veRL's names mean
something else from one loss to the next, which is what a veRL user's old curves show:

======================  =================================  ===================================  ========================
loss (ours / veRL's)    pg_clipfrac                        pg_clipfrac_lower                    ppo_kl
======================  =================================  ===================================  ========================
ppo / vanilla           PPO clip active                    dual clip active (A < 0); 0 without  mean(-log ρ), log ρ ±20
gspo                    sequence-ratio clip active         0                                    mean(-log ρ) per token
cispo                   ratio outside its band             0                                    mean(-log ρ), ±20
gpg                     (none)                             (none)                               (none)
sapo                    0                                  0                                    mean(-log ρ), ±20
geo_mean                log ρ clipped, on A > 0 tokens     log ρ clipped, on A < 0 tokens       mean(-log ρ)
clip_cov                tokens the covariance rule dropped (none)                               mean(-log ρ)
kl_cov                  (none)                             (none)                               mean(|log ρ|)
dppo_tv, dppo_kl        outside the trust region           inside it, ratio above the cap       mean(-log ρ), ±20
dro                     (none)                             (none)                               mean(-log ρ)
bypass gpg (reinforce)  (none)                             (none)                               mean(log π_roll - log π)
======================  =================================  ===================================  ========================

"±20": the log-ratio clamped to [-20, 20] first, as that veRL function does; means are veRL's ``masked_mean``
(``Σ x·m / (Σ m + 1e-8)``: 0, not NaN, on an empty mask) over the loss's mask. In veRL's bypass mode the ppo loss is
its vanilla against the rollout log-probs over the tokens rejection kept (as ours), the gpg loss its reinforce
(:func:`reinforce_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from rlhf.algo.policy_loss import PolicyLossParams

PG_CLIPFRAC = "actor/pg_clipfrac"
PG_CLIPFRAC_LOWER = "actor/pg_clipfrac_lower"
PPO_KL = "actor/ppo_kl"
#: veRL's clamp of the log-ratio before exp, in the losses that clamp (vanilla, cispo, sapo, dppo).
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class LossTokens:
    """One micro-batch's policy-loss inputs (detached) and what the loss did with them.

    Attributes:
        log_probs, old_log_probs, advantages, mask: ``[B, T]``, as the loss got them (``old_log_probs``: the
            rollout's in bypass mode; ``mask``: after rejection).
        clip_active: ``[B, T]`` bool, the tokens where the loss's own clip was active (its ``ppo_clip_ratio``).
        params: the loss's settings (its clip range included).
        dual_clip: the dual clip's ``c``, or ``None``.
    """

    log_probs: Tensor
    old_log_probs: Tensor
    advantages: Tensor
    mask: Tensor
    clip_active: Tensor
    params: PolicyLossParams
    dual_clip: float | None = None

    def mean(self, x: Tensor) -> Tensor:
        """veRL's ``masked_mean`` over the loss's mask."""
        return (x.float() * self.mask).sum() / (self.mask.sum() + 1e-8)

    def log_ratio(self, clamped: bool) -> Tensor:
        log_ratio = self.log_probs - self.old_log_probs
        return log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) if clamped else log_ratio

    def kl(self, clamped: bool) -> Tensor:
        """``mean(log π_old - log π)``, the log-ratio clamped first where that veRL loss clamps it."""
        return self.mean(-self.log_ratio(clamped))

    def zero(self) -> Tensor:
        return torch.zeros((), dtype=torch.float32, device=self.log_probs.device)


def _ppo_clip(t: LossTokens) -> Tensor:
    """Where PPO's clip is active, ``-A·clip(ρ) > -A·ρ`` (ρ from the clamped log-ratio)."""
    ratio = t.log_ratio(clamped=True).exp()
    clipped = ratio.clamp(1.0 - t.params.clip_eps_low, 1.0 + t.params.clip_eps_high)
    return -t.advantages * clipped > -t.advantages * ratio


def ppo_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's vanilla: the dual clip's share counts the ``A < 0`` tokens whose clipped loss exceeds ``-c·A`` (veRL
    applies it always, ``c = clip_ratio_c``; without ours it bounds no token: 0)."""
    lower = t.zero()
    if t.dual_clip is not None:
        ratio = t.log_ratio(clamped=True).exp()
        clipped = ratio.clamp(1.0 - t.params.clip_eps_low, 1.0 + t.params.clip_eps_high)
        loss = torch.maximum(-t.advantages * ratio, -t.advantages * clipped)
        lower = t.mean((loss > -t.advantages * t.dual_clip) & (t.advantages < 0))
    return {PG_CLIPFRAC: t.mean(t.clip_active), PPO_KL: t.kl(clamped=True), PG_CLIPFRAC_LOWER: lower}


def gspo_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's gspo: the clip on the sequence ratio each token carries; its KL is the token log-ratio's, unclamped."""
    return {PG_CLIPFRAC: t.mean(t.clip_active), PPO_KL: t.kl(clamped=False), PG_CLIPFRAC_LOWER: t.zero()}


def cispo_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's cispo: the tokens whose ratio its band changed."""
    return {PG_CLIPFRAC: t.mean(t.clip_active), PPO_KL: t.kl(clamped=True), PG_CLIPFRAC_LOWER: t.zero()}


def gpg_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's gpg reports no metric."""
    return {}


def sapo_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's sapo: no clip (both fractions 0)."""
    return {PG_CLIPFRAC: t.zero(), PPO_KL: t.kl(clamped=True), PG_CLIPFRAC_LOWER: t.zero()}


def geo_mean_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's geo_mean: the tokens whose log-ratio left ``[-ε_low, ε_high]`` (whichever side; ours, ``clip_active``),
    those with ``A > 0`` and those with ``A < 0`` apart (ours counts both together, and ``A = 0`` too)."""
    return {
        PG_CLIPFRAC: t.mean(t.clip_active & (t.advantages > 0)),
        PPO_KL: t.kl(clamped=False),
        PG_CLIPFRAC_LOWER: t.mean(t.clip_active & (t.advantages < 0)),
    }


def clip_cov_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's clip_cov: only the tokens its covariance rule took out of the loss, not the PPO-clipped ones (ours
    counts both; the rule never picks a clipped token, so they are the loss's clip_active less the PPO clip)."""
    return {PG_CLIPFRAC: t.mean(t.clip_active & ~_ppo_clip(t)), PPO_KL: t.kl(clamped=False)}


def kl_cov_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's kl_cov: its ``ppo_kl`` is the mean absolute log-ratio; no clip fraction."""
    return {PPO_KL: t.mean(t.log_ratio(clamped=False).abs())}


def dppo_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's dppo_tv and dppo_kl: the tokens outside the trust region (ours), and those inside it whose ratio the
    cap (``clip_ratio_c``) truncated."""
    over_cap = t.log_ratio(clamped=True).exp() > t.params.dppo_ratio_cap
    return {
        PG_CLIPFRAC: t.mean(t.clip_active),
        PPO_KL: t.kl(clamped=True),
        PG_CLIPFRAC_LOWER: t.mean(over_cap & ~t.clip_active),
    }


def dro_metrics(t: LossTokens) -> dict[str, Tensor]:
    """veRL's dro: ``ppo_kl`` only."""
    return {PPO_KL: t.kl(clamped=False)}


#: Our policy-loss name (rlhf.algo.policy_loss.POLICY_LOSSES) -> veRL's metrics of its loss.
VERL_METRICS: dict[str, Callable[[LossTokens], dict[str, Tensor]]] = {
    "ppo": ppo_metrics,
    "gspo": gspo_metrics,
    "cispo": cispo_metrics,
    "gpg": gpg_metrics,
    "sapo": sapo_metrics,
    "geo_mean": geo_mean_metrics,
    "clip_cov": clip_cov_metrics,
    "kl_cov": kl_cov_metrics,
    "dppo_tv": dppo_metrics,
    "dppo_kl": dppo_metrics,
    "dro": dro_metrics,
}


def verl_loss_metrics(loss_type: str, tokens: LossTokens) -> dict[str, Tensor]:
    """veRL's metrics of the loss ``loss_type`` on one micro-batch (0-d tensors, under veRL's names)."""
    try:
        fn = VERL_METRICS[loss_type]
    except KeyError:
        raise KeyError(f"no veRL metrics for policy loss {loss_type!r}; known: {', '.join(VERL_METRICS)}") from None
    with torch.no_grad():
        return fn(tokens)


def reinforce_metrics(log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """veRL's bypass-mode reinforce (our gpg with ``algorithm.old_logprobs=rollout``): ``ppo_kl`` is
    ``mean(log π_rollout - log π)`` over the tokens rejection kept, unclamped."""
    with torch.no_grad():
        diff = (rollout_log_probs - log_probs.detach()).float() * mask
        return {PPO_KL: diff.sum() / (mask.sum() + 1e-8)}
