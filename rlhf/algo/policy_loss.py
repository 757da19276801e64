"""Policy losses (PPO clip, dual clip, GSPO, CISPO, GPG, SAPO, GMPO, Clip-Cov, KL-Cov, DPPO, DRO) with the
rollout/trainer importance-sampling correction (:mod:`rlhf.algo.is_correction`), value loss, entropy bonus.

OpenRLHF ``PolicyLoss`` and ``ValueLoss`` in ``openrlhf/models/loss.py``; the total actor loss is assembled in
``ActorPPOTrainer.training_step``: ``L_pg + kl_coef · agg(KL) [KL as loss] - entropy_coef · agg(H)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from rlhf.algo.aggregation import LossNormalizer, aggregate
from rlhf.algo.is_correction import ISCorrection, is_weights
from rlhf.algo.logprobs import masked_mean, masked_sum
from rlhf.algo.registry import Registry
from rlhf.algo.verl_metrics import LossTokens, verl_loss_metrics
from rlhf.spec.names import SEQ_RATIO_AGGREGATIONS, SEQ_RATIO_GRADIENTS, SEQ_RATIO_IS_CORRECTIONS

# PPO's log-ratio is clamped before exp (OpenRLHF) so a stale token cannot overflow the ratio to inf.
LOG_RATIO_CLAMP = 20.0
# GSPO-token's log-ratio is bounded above only, at veRL 0.9.1's value (compute_policy_loss_gspo).
TOKEN_FORM_LOG_RATIO_MAX = 10.0


@dataclass(frozen=True)
class PolicyLossParams:
    """What the policy losses read besides the tensors (``algorithm.policy_loss.*``); the defaults are veRL 0.9.1's
    (``actor.yaml``).

    Attributes:
        clip_eps_low, clip_eps_high: the clip range ``[1 - ε_low, 1 + ε_high]`` (geo_mean: of the log-ratio,
            ``[-ε_low, ε_high]``).
        sapo_tau_pos, sapo_tau_neg: SAPO's gate temperatures for ``A > 0`` and ``A <= 0``.
        cov_fraction: Clip-Cov's and KL-Cov's share of a micro-batch's tokens selected by covariance (>= 1 token).
        clip_cov_low, clip_cov_high: Clip-Cov's open band of eligible covariances.
        kl_cov_coef: KL-Cov's weight of ``|log ρ|`` on the selected tokens.
        dppo_ratio_cap: DPPO's truncation of the detached ratio (veRL's ``clip_ratio_c``); its trust region's bounds
            are ``clip_eps_low`` / ``clip_eps_high``.
        dro_beta: DRO's weight of the quadratic log-ratio penalty.
        seq_ratio_aggregation: a sequence-ratio loss (gspo) is aggregated by ``seq_mean`` whatever is configured
            (``seq_mean``: OpenRLHF, the GSPO paper) or by the configured aggregation (``configured``: veRL, TRL).
        seq_ratio_is_correction: with an enabled IS correction, a sequence-ratio loss takes its ratio against the
            rollout log-probs and applies no weights (``rollout_ratio``: OpenRLHF), or takes it against the old
            log-probs and multiplies each token's loss by its IS coefficient as the token-level losses do
            (``token_weights``: veRL, TRL).
        seq_ratio_gradient: the sequence ratio's gradient reaches every token of the sequence through the mean
            (``sequence``: GSPO; OpenRLHF, TRL), or each token's ratio ``sg[s] · π_t / sg[π_t]`` has the same value
            and a gradient through its own log-prob only (``token``: GSPO-token, veRL; its log-ratio is clamped at
            10 above, as veRL's). The two are equal when the advantage and the IS coefficient are constant along
            each sequence.
    """

    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    cov_fraction: float = 0.0002
    clip_cov_low: float = 1.0
    clip_cov_high: float = 5.0
    kl_cov_coef: float = 0.1
    dppo_ratio_cap: float = 3.0
    dro_beta: float = 0.0
    seq_ratio_aggregation: str = "seq_mean"
    seq_ratio_is_correction: str = "rollout_ratio"
    seq_ratio_gradient: str = "sequence"

    def __post_init__(self) -> None:
        for name, valid in (
            ("seq_ratio_aggregation", SEQ_RATIO_AGGREGATIONS),
            ("seq_ratio_is_correction", SEQ_RATIO_IS_CORRECTIONS),
            ("seq_ratio_gradient", SEQ_RATIO_GRADIENTS),
        ):
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} {getattr(self, name)!r}; valid: {', '.join(valid)}")


#: ``(log_probs, old_log_probs, advantages, action_mask, params) -> (loss[B, T], clipped[B, T])``: a per-token loss
#: that is not PPO's clipped surrogate, and where its clip was active.
TokenLoss = Callable[[Tensor, Tensor, Tensor, Tensor, PolicyLossParams], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PolicyObjective:
    """How a policy loss forms its importance ratio.

    Attributes:
        ratio: ``(log_probs, ref_log_probs, action_mask) -> ratio[B, T]``.
        sequence_level: one ratio per sequence (GSPO). By default forces ``seq_mean`` aggregation and, with IS
            correction enabled, takes the ratio against the rollout log-probs with no token IS weights (OpenRLHF);
            ``PolicyLossParams.seq_ratio_*`` choose otherwise.
        token_form: the ratio's GSPO-token form (same values, each token's gradient through its own log-prob), used
            with ``PolicyLossParams.seq_ratio_gradient="token"``.
        token_loss: replaces PPO's ``-min(ρA, clip(ρ)A)`` (CISPO, GPG, ...); ``None``: PPO's surrogate on ``ratio``.
        seq_mean: the loss is aggregated by ``seq_mean`` whatever is configured (SAPO, GMPO: veRL's ignore
            loss_agg_mode); a token loss holding one value per sequence on each of its tokens then counts it once.
        seq_is_weights: IS correction weights are the geometric mean of each sequence's token weights (GMPO, veRL).
    """

    ratio: Callable[[Tensor, Tensor, Tensor], Tensor]
    sequence_level: bool
    token_loss: TokenLoss | None = None
    seq_mean: bool = False
    seq_is_weights: bool = False
    token_form: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None


POLICY_LOSSES: Registry[PolicyObjective] = Registry("policy loss")


def ppo_ratio(log_probs: Tensor, old_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Token ratio ``ρ_t = exp(clamp(log π - log π_old, -20, 20))`` (PPO, arXiv 1707.06347)."""
    return (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()


def gspo_ratio(log_probs: Tensor, ref_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Sequence ratio ``s = exp(Σ_t m_t (log π - log π_ref) / max(Σ_t m_t, 1))`` broadcast to the sequence's tokens
    (``· m``): the geometric mean of the token ratios (GSPO, arXiv 2507.18071)."""
    log_ratio = masked_sum(log_probs - ref_log_probs, action_mask, dim=-1) / action_mask.sum(dim=-1).clamp(min=1)
    return log_ratio.exp().unsqueeze(-1) * action_mask


def gspo_token_ratio(log_probs: Tensor, ref_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """GSPO-token's ratio (arXiv 2507.18071, section 4.3; veRL's gspo): ``s_t = sg[s] · π_t / sg[π_t]``, ``s`` the
    sequence ratio of :func:`gspo_ratio`, formed in log space and clamped at ``TOKEN_FORM_LOG_RATIO_MAX`` above. Its
    value is ``s`` on every token; its gradient is ``s · ∇ log π_t``, so a token-varying advantage or IS weight
    reaches its own token only."""
    log_ratio = masked_sum(log_probs - ref_log_probs, action_mask, dim=-1) / action_mask.sum(dim=-1).clamp(min=1)
    token_log_ratio = log_probs - log_probs.detach() + log_ratio.detach().unsqueeze(-1)
    return token_log_ratio.clamp(max=TOKEN_FORM_LOG_RATIO_MAX).exp() * action_mask


def cispo_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """CISPO (MiniMax-M1, arXiv 2506.13585; veRL ``compute_policy_loss_cispo``): ``L = -sg(clip(ρ, 1 - ε_low,
    1 + ε_high)) · A · log π``. The clipped ratio is a detached weight, so a clipped token still has a gradient
    (PPO's clip removes it); ``ε_low >= 1`` leaves the ratio unbounded below."""
    ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    weight = ratio.clamp(1.0 - p.clip_eps_low, 1.0 + p.clip_eps_high)
    return -weight.detach() * advantages * log_probs, ratio != weight


def gpg_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """GPG (Group Policy Gradient, arXiv 2504.02546; veRL ``compute_policy_loss_gpg``): plain REINFORCE, ``L = -A ·
    log π``, no ratio and no clip (its samples are used once: one optimizer step per rollout)."""
    return -advantages * log_probs, torch.zeros_like(log_probs, dtype=torch.bool)


def sapo_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """SAPO (arXiv 2511.20347; veRL ``compute_policy_loss_sapo``): a soft gate instead of the clip, ``L = -f(ρ) · A``
    with ``f(ρ) = sigmoid(τ (ρ - 1)) · 4 / τ`` (slope 1 at ρ = 1, flattening away from it), ``τ = τ_pos`` where
    ``A > 0`` else ``τ_neg``; aggregated by ``seq_mean`` (veRL's, whatever loss_agg_mode says)."""
    ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(p.sapo_tau_pos, dtype=advantages.dtype),
        torch.as_tensor(p.sapo_tau_neg, dtype=advantages.dtype),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return -gate * advantages, torch.zeros_like(log_probs, dtype=torch.bool)


def geo_mean_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """GMPO (arXiv 2507.20673; veRL ``compute_policy_loss_geo_mean``): per sequence ``L = -Ā · exp(mean_t ℓ_t)``, Ā
    the sequence's mean advantage and ``ℓ_t = sgn(A) min(sgn(A) log ρ_t, sgn(A) clip(log ρ_t, -ε_low, ε_high))``
    (the log-ratio clipped on the side that would grow the objective). Returned on each of the sequence's tokens, so
    the ``seq_mean`` aggregation counts it once per sequence (veRL: the micro-batch's mean over sequences)."""
    log_ratio = log_probs - old_log_probs
    sign = torch.sign(advantages)
    clamped = log_ratio.clamp(-p.clip_eps_low, p.clip_eps_high)
    kept = sign * torch.min(sign * log_ratio, sign * clamped)
    count = action_mask.sum(dim=-1)
    ratio = torch.exp((kept * action_mask).sum(dim=-1) / (count + 1e-8))
    advantage = (advantages * action_mask).sum(dim=-1) / (count + 1e-8)
    loss = (-advantage * ratio).unsqueeze(-1).expand_as(log_probs)
    return loss, log_ratio != clamped


def _masked_mean_all(x: Tensor, mask: Tensor) -> Tensor:
    """veRL's ``masked_mean``: ``Σ x·m / (Σ m + 1e-8)``."""
    return (x * mask).sum() / (mask.sum() + 1e-8)


def clip_cov_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """Clip-Cov (arXiv 2505.22617; veRL ``compute_policy_loss_clip_cov``): PPO's clipped loss (no dual clip), except
    that ``max(⌊cov_fraction · N⌋, 1)`` tokens, drawn at random (``torch.randperm``, the global generator) among the
    unclipped ones whose covariance ``(A - mean A)(log π - mean log π)`` lies strictly inside ``(low, high)``, are
    dropped from the loss (no gradient): curbing the tokens that collapse the entropy."""
    ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - p.clip_eps_low, 1.0 + p.clip_eps_high)
    valid = action_mask > 0
    clipped = (loss2 > loss1) & valid
    with torch.no_grad():
        cov = (advantages - _masked_mean_all(advantages, action_mask)) * (
            log_probs - _masked_mean_all(log_probs, action_mask)
        )
        cov[~valid] = -torch.inf
        cov[clipped] = -torch.inf
        count = max(int(p.cov_fraction * action_mask.sum().item()), 1)
        eligible = torch.nonzero((cov < p.clip_cov_high) & (cov > p.clip_cov_low) & valid)
        keep = torch.ones_like(advantages)
        if len(eligible) > 0:
            eligible = eligible[torch.randperm(len(eligible))[: min(count, len(eligible))]]
            keep[eligible[:, 0], eligible[:, 1]] = 0
    return torch.maximum(loss1, loss2) * keep, clipped | (keep == 0)


def kl_cov_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """KL-Cov (arXiv 2505.22617; veRL ``compute_policy_loss_kl_cov``): ``L = -A · ρ`` (no clip), plus
    ``kl_cov_coef · |log ρ|`` on the ``max(⌊cov_fraction · N⌋, 1)`` tokens of the micro-batch with the largest
    covariance ``(A - mean A)(log π - mean log π)`` (means over its N tokens)."""
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    loss = -advantages * log_ratio.exp()
    selected = torch.zeros_like(log_probs, dtype=torch.bool)
    valid = action_mask > 0
    with torch.no_grad():
        adv, logp = advantages[valid].reshape(-1), log_probs[valid].reshape(-1)
        if adv.numel() > 0:
            cov = (adv - adv.mean()) * (logp - logp.mean())
            top = torch.topk(cov, max(1, int(cov.numel() * p.cov_fraction)), largest=True).indices
            selected.view(-1)[torch.nonzero(valid.reshape(-1), as_tuple=True)[0][top]] = True
    return torch.where(selected, loss + p.kl_cov_coef * log_ratio.abs(), loss), selected


def _dppo_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, inside: Tensor, cap: float
) -> tuple[Tensor, Tensor]:
    """DPPO's loss on the tokens ``inside`` its trust region: ``-A · sg[min(ρ, cap)] · log π`` (a truncated
    importance weight instead of PPO's clip); the tokens outside get no gradient and count as clipped."""
    ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    weight = ratio.clamp(max=cap).detach()
    keep = inside.detach().float()
    return -advantages * weight * log_probs * keep, keep == 0


def dppo_tv_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """DPPO-Binary-TV (arXiv 2602.04879; veRL ``compute_policy_loss_dppo_tv``): a token is inside the trust region
    when its probability moved by at most ``clip_eps_high`` up (``A > 0``) or ``clip_eps_low`` down (``A <= 0``)."""
    moved = log_probs.exp() - old_log_probs.exp()
    inside = torch.where(advantages > 0, moved <= p.clip_eps_high, moved >= -p.clip_eps_low)
    return _dppo_token_loss(log_probs, old_log_probs, advantages, inside, p.dppo_ratio_cap)


def dppo_kl_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """DPPO-Binary-KL (veRL ``compute_policy_loss_dppo_kl``): the binary KL ``p_old log(p_old / p) + (1 - p_old)
    log((1 - p_old) / (1 - p))`` of the token's old and new probabilities bounds it, by ``clip_eps_high`` where the
    probability rose with ``A > 0`` and by ``clip_eps_low`` where it fell with ``A <= 0``; a move with the
    advantage's grain the other way is always inside."""
    prob, old_prob = log_probs.exp(), old_log_probs.exp()
    binary_kl = old_prob * (old_log_probs - log_probs) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    inside = torch.where(
        advantages > 0,
        (binary_kl <= p.clip_eps_high) | (prob <= old_prob),
        (binary_kl <= p.clip_eps_low) | (prob >= old_prob),
    )
    return _dppo_token_loss(log_probs, old_log_probs, advantages, inside, p.dppo_ratio_cap)


def dro_token_loss(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, p: PolicyLossParams
) -> tuple[Tensor, Tensor]:
    """DRO (veRL ``compute_policy_loss_dro``): ``-(A · log π - β/2 · (log π - log π_old)²)``, no clip."""
    log_ratio = log_probs - old_log_probs
    return -(log_probs * advantages - 0.5 * p.dro_beta * log_ratio.square()), torch.zeros_like(
        log_probs, dtype=torch.bool
    )


POLICY_LOSSES.add("ppo", PolicyObjective(ratio=ppo_ratio, sequence_level=False))
POLICY_LOSSES.add("gspo", PolicyObjective(ratio=gspo_ratio, sequence_level=True, token_form=gspo_token_ratio))
POLICY_LOSSES.add("cispo", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=cispo_token_loss))
POLICY_LOSSES.add("gpg", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=gpg_token_loss))
POLICY_LOSSES.add(
    "sapo", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=sapo_token_loss, seq_mean=True)
)
POLICY_LOSSES.add(
    "geo_mean",
    PolicyObjective(
        ratio=ppo_ratio, sequence_level=False, token_loss=geo_mean_token_loss, seq_mean=True, seq_is_weights=True
    ),
)
POLICY_LOSSES.add("clip_cov", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=clip_cov_token_loss))
POLICY_LOSSES.add("kl_cov", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=kl_cov_token_loss))
POLICY_LOSSES.add("dppo_tv", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=dppo_tv_token_loss))
POLICY_LOSSES.add("dppo_kl", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=dppo_kl_token_loss))
POLICY_LOSSES.add("dro", PolicyObjective(ratio=ppo_ratio, sequence_level=False, token_loss=dro_token_loss))


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
        verl: with ``verl_metrics``, veRL 0.9.1's metrics of this loss under its names (``actor/pg_clipfrac``, ...:
            :mod:`rlhf.algo.verl_metrics`); else ``None``.
    """

    loss: Tensor
    clip_ratio: Tensor
    ppo_kl: Tensor
    rollout_kl: Tensor | None
    is_filter_ratio: Tensor | None = None
    verl: dict[str, Tensor] | None = None


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
    params: PolicyLossParams | None = None,
    is_batch_totals: Tensor | None = None,
    is_mask: Tensor | None = None,
    verl_metrics: bool = False,
) -> PolicyLossOutput:
    """Clipped surrogate policy loss (OpenRLHF ``PolicyLoss.forward``).

    ``surr1 = ρA``, ``surr2 = clamp(ρ, 1 - ε_low, 1 + ε_high) · A``, ``L = -min(surr1, surr2)``; with dual clip
    ``c > 1`` (arXiv 1912.09729) ``L = -where(A < 0, max(min(surr1, surr2), c·A), min(surr1, surr2))``. For token-level
    objectives (and GSPO with ``seq_ratio_is_correction="token_weights"``) and an enabled ``is_correction``,
    ``L ← coef · L`` with the detached coefficients of :func:`rlhf.algo.is_correction.is_weights` (from ``log π_old``
    and ``log π_rollout``). Then aggregated (``seq_mean`` forced for GSPO unless ``seq_ratio_aggregation`` is
    ``configured``).

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
        params: the other losses' settings and GSPO's ``seq_ratio_*`` choices (:class:`PolicyLossParams`; its clip
            range is ``clip_eps_low/high``).
        is_batch_totals: with ``is_correction.batch_normalize``, the batch the IS weights are normalised over
            (:func:`rlhf.algo.is_correction.is_weight_totals`); ``None``: this micro-batch.
        is_mask: the tokens the IS weights are read over where rejection sampling took some out of ``action_mask``
            (every generated token, as veRL's weights); ``None``: ``action_mask``.
        verl_metrics: also compute veRL's metrics of this loss (:attr:`PolicyLossOutput.verl`).
    """
    objective = POLICY_LOSSES.get(loss_type)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if dual_clip is not None and objective.token_loss is not None:
        raise ValueError(f"{loss_type} has no dual clip (it bounds PPO's surrogate): set dual_clip to None")
    correct = is_correction is not None and is_correction.enabled
    if correct and rollout_log_probs is None:
        raise ValueError(f"IS correction {is_correction} needs the rollout engine's log-probs")

    p = replace(params or PolicyLossParams(), clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high)
    sequence = objective.sequence_level
    # GSPO with IS correction measures its sequence ratio against the sampler itself instead of reweighting tokens,
    # unless told to weigh its tokens as the token-level losses do.
    token_weighted = not sequence or p.seq_ratio_is_correction == "token_weights"
    use_rollout_ref = sequence and correct and not token_weighted
    if objective.token_loss is not None:
        loss, clip_active = objective.token_loss(log_probs, old_log_probs, advantages, action_mask, p)
    else:
        ratio_fn = objective.ratio
        if sequence and p.seq_ratio_gradient == "token" and objective.token_form is not None:
            ratio_fn = objective.token_form
        ratio = ratio_fn(log_probs, rollout_log_probs if use_rollout_ref else old_log_probs, action_mask)
        surr1 = ratio * advantages
        surr2 = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
        clipped = torch.min(surr1, surr2)
        if dual_clip is not None:
            clipped = torch.where(advantages < 0, torch.max(clipped, dual_clip * advantages), clipped)
        loss = -clipped
        clip_active = surr2 < surr1

    is_filter_ratio = None
    if correct and token_weighted:
        weighed = action_mask if is_mask is None else is_mask
        weights = is_weights(old_log_probs, rollout_log_probs, weighed, is_correction, is_batch_totals)
        coef = weights.coef
        if objective.seq_is_weights:
            count = weighed.sum(dim=-1, keepdim=True)
            coef = torch.exp((torch.log(coef + 1e-10) * weighed).sum(dim=-1, keepdim=True) / (count + 1e-8))
        loss = coef * loss
        is_filter_ratio = weights.filter_ratio

    with torch.no_grad():
        clip_ratio = masked_mean(clip_active.float(), action_mask)
        ppo_kl = masked_mean(old_log_probs - log_probs, action_mask)
        rollout_kl = None if rollout_log_probs is None else masked_mean(rollout_log_probs - old_log_probs, action_mask)
    verl = None
    if verl_metrics:
        tokens = LossTokens(log_probs.detach(), old_log_probs, advantages, action_mask, clip_active, p, dual_clip)
        verl = verl_loss_metrics(loss_type, tokens)
    forced = (sequence and p.seq_ratio_aggregation == "seq_mean") or objective.seq_mean
    aggregated = aggregate(loss, action_mask, "seq_mean" if forced else aggregation, norm)
    return PolicyLossOutput(aggregated, clip_ratio, ppo_kl, rollout_kl, is_filter_ratio, verl)


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
