"""What the RL loop asks the ranks to compute: forward functions (log-probs, values, rewards) and the actor and
critic losses. Module-level functions (with ``functools.partial`` of frozen settings) so Ray pickles them by name;
all math comes from rlhf.algo.

Micro-batches are dicts of the experience tensors (rlhf.pipelines.experience.TENSOR_FIELDS) plus ``kl_coef``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from rlhf.algo import (
    ISCorrection,
    LossNormalizer,
    PolicyLossParams,
    compute_approx_kl,
    entropy_bonus,
    kl_loss,
    masked_mean,
    policy_loss,
    value_loss,
)
from rlhf.algo.aggregation import response_width
from rlhf.algo.is_correction import is_weight_totals, is_weights
from rlhf.algo.policy_loss import PolicyLossOutput
from rlhf.algo.rejection import Rejection, rejection_keep
from rlhf.algo.verl_metrics import reinforce_metrics
from rlhf.models.forward import (
    causal_lm_log_probs,
    causal_lm_scores,
    forward_tokens,
    value_model_rewards,
    value_model_values,
)
from rlhf.spec import names
from rlhf.spec.schema import ExperimentSpec

# OpenRLHF's actor aggregates its KL-loss and entropy terms by token mean whatever --actor.loss_agg_mode (and GSPO)
# choose for the policy loss (ActorPPOTrainer.training_step: aggregate_loss(kl, mask, **loss_batch_info));
# algorithm.policy_loss.terms_aggregation=policy aggregates them as the policy loss instead (veRL).
TERM_AGGREGATION = "token_mean"


def width_normalizer(norm: LossNormalizer | None, mask: Tensor) -> LossNormalizer:
    """``norm`` with Dr. GRPO's divisor set to this micro-batch's longest response (aggregation_norm_from=
    micro_batch_width, veRL 0.9.1)."""
    return replace(norm or LossNormalizer(), constant=float(response_width(mask)))


@dataclass(frozen=True)
class ActorLossSettings:
    loss_type: str
    clip_eps_low: float
    clip_eps_high: float
    dual_clip: float | None
    aggregation: str
    temperature: float
    entropy_coef: float | None
    kl_in_loss: bool
    kl_estimator: str
    is_correction: ISCorrection
    kl_unbiased_gradient: bool = False
    packing: bool = False  # trainer.packing: packed rows in the training forward (rlhf.models.packing)
    terms_aggregation: str = TERM_AGGREGATION  # the KL-loss and entropy terms' (names.TERMS_AGGREGATIONS)
    norm_from_width: bool = False  # Dr. GRPO's divisor: each micro-batch's longest response (veRL)
    params: PolicyLossParams = PolicyLossParams()  # sapo, clip_cov, kl_cov settings (the clip range is above)
    kl_straight_through: bool = False  # veRL's '+' estimators: k2's gradient, no importance weight
    kl_clamp_k3_only: bool = False  # veRL: k1, k2 and abs unbounded
    # algorithm.old_logprobs=rollout (veRL's bypass mode): the old log-probs are the engine's, and the IS weights and
    # rejection compare the current policy with them in each micro-batch
    bypass: bool = False
    rejection: Rejection | None = None
    entropy_tempered: bool = False  # algorithm.policy_loss.entropy_logits=tempered: the bonus's H at the temperature
    verl_metrics: bool = False  # logging.verl_metrics: veRL's actor/* metrics of the loss beside ours

    @classmethod
    def from_spec(cls, spec: ExperimentSpec) -> ActorLossSettings:
        a = spec.algorithm
        isc = a.is_correction
        return cls(
            loss_type=a.policy_loss.type,
            clip_eps_low=a.policy_loss.eps_clip_low,
            clip_eps_high=a.policy_loss.eps_clip_high,
            dual_clip=a.policy_loss.dual_clip,
            aggregation=names.canonical_aggregation(a.policy_loss.aggregation),
            temperature=spec.rollout.temperature or 1.0,
            entropy_coef=a.policy_loss.entropy_coef,
            kl_in_loss=a.kl.placement == "loss" and a.kl.coef > 0,
            kl_estimator=a.kl.estimator,
            is_correction=ISCorrection(
                *isc.axes(), *isc.bounds(), seq_ratio=isc.seq_ratio, batch_normalize=isc.batch_normalize
            ),
            kl_unbiased_gradient=a.kl.unbiased_gradient,
            packing=spec.trainer.packing,
            terms_aggregation=(
                names.canonical_aggregation(a.policy_loss.aggregation)
                if a.policy_loss.terms_aggregation == "policy"
                else TERM_AGGREGATION
            ),
            norm_from_width=a.policy_loss.aggregation_norm is None
            and a.policy_loss.aggregation_norm_from == "micro_batch_width",
            params=policy_loss_params(a.policy_loss),
            kl_straight_through=a.kl.straight_through,
            kl_clamp_k3_only=a.kl.clamp_k3_only,
            bypass=a.old_logprobs == "rollout",
            entropy_tempered=a.policy_loss.entropy_logits == "tempered",
            rejection=(
                Rejection.of(a.rejection.criteria, a.rejection.upper, a.rejection.lower)
                if a.rejection.enabled
                else None
            ),
            verl_metrics=spec.logging.verl_metrics,
        )


def rollout_is_weight_totals(exp, correction: ISCorrection) -> Tensor:
    """The sum and count (:func:`rlhf.algo.is_correction.is_weight_totals`) of the IS weights over a whole rollout
    batch (an ExperienceBatch with its old log-probs), which ``batch_normalize`` divides every micro-batch's by."""
    plain = replace(correction, batch_normalize=False)
    generated = getattr(exp, "generated_mask", None)  # before rejection sampling, as veRL's weights
    mask = generated if generated is not None else exp.action_mask
    coef = is_weights(exp.old_logprobs, exp.rollout_logprobs, mask, plain).coef
    return is_weight_totals(coef, mask, correction.level)


def policy_loss_params(pl) -> PolicyLossParams:
    """The settings of algorithm.policy_loss (a PolicyLossSpec) the sapo, geo_mean, clip_cov, kl_cov, dppo and dro
    losses read, and gspo's seq_ratio_* choices."""
    low, high = pl.clip_cov_bounds
    return PolicyLossParams(
        clip_eps_low=pl.eps_clip_low,
        clip_eps_high=pl.eps_clip_high,
        sapo_tau_pos=pl.sapo_tau_pos,
        sapo_tau_neg=pl.sapo_tau_neg,
        cov_fraction=pl.cov_fraction,
        clip_cov_low=float(low),
        clip_cov_high=float(high),
        kl_cov_coef=pl.kl_cov_coef,
        dppo_ratio_cap=pl.dppo_ratio_cap,
        dro_beta=pl.dro_beta if pl.dro_beta is not None else 0.0,
        seq_ratio_aggregation=pl.seq_ratio_aggregation,
        seq_ratio_is_correction=pl.seq_ratio_is_correction,
        seq_ratio_gradient=pl.seq_ratio_gradient,
    )


def policy_logprobs_fn(model, batch: dict[str, Tensor], *, temperature: float, packing: bool = False) -> Tensor:
    """``[B, T-1]`` log-probs of the sequence under the policy (old log-probs) or the reference: log-softmax(logits /
    temperature) over the full vocabulary, no top-k/top-p (OpenRLHF), which is what the rollout engines report
    (rlhf.backends.contract.logprob_meaning)."""
    return causal_lm_log_probs(
        model, batch["sequences"], batch["attention_mask"], temperature=temperature, packing=packing
    )


def policy_scores_fn(
    model,
    batch: dict[str, Tensor],
    *,
    temperature: float,
    packing: bool = False,
    sum_pi_squared: bool = False,
    entropy: bool = False,
) -> Tensor:
    """``[B, k, T-1]`` from one forward: the old log-probs of :func:`policy_logprobs_fn`, then, where asked, each
    step's ``Σπ²`` (veRL's ``calculate_sum_pi_squared``, for the optimal token baseline) and the entropy of the
    distribution sampled from (veRL's ``actor/entropy``), at the same temperature."""
    out = causal_lm_scores(
        model,
        batch["sequences"],
        batch["attention_mask"],
        temperature=temperature,
        entropy_temperatures=(temperature,) if entropy else (),
        sum_pi_squared=sum_pi_squared,
        packing=packing,
    )
    rows = [out.log_probs, *([out.sum_pi_squared] if sum_pi_squared else []), *out.entropies]
    return torch.stack(rows, dim=1)


def critic_values_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> Tensor:
    return value_model_values(model, batch["sequences"], batch["attention_mask"], packing=packing).float()


def reward_model_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> Tensor:
    return value_model_rewards(model, batch["sequences"], batch["attention_mask"], packing=packing).float()


def bypass_policy_loss(
    log_probs: Tensor, rollout: Tensor, advantages: Tensor, mask: Tensor, norm, s: ActorLossSettings
) -> tuple[PolicyLossOutput, dict[str, Tensor | float]]:
    """veRL 0.9.1's bypass mode (``compute_policy_loss_bypass_mode``): the old log-probs are the rollout engine's, and
    in each micro-batch the current policy (detached) is compared with them: rejection sampling drops tokens from the
    loss, and the loss is PPO's clip against the engine's log-probs (``ppo``: its ratio is the IS correction, no
    weights) or ``gpg`` (veRL's ``reinforce``: ``-A log pi`` times the IS weights ``pi / pi_rollout``, normalised
    within the micro-batch where asked). ``ppo_kl`` is ``mean(log pi_rollout - log pi)`` over the kept tokens; with
    ``verl_metrics``, veRL's metrics are its vanilla loss's (ppo) or its reinforce's (gpg: ppo_kl alone)."""
    current = log_probs.detach()
    kept, metrics = mask, {}
    if s.rejection is not None:
        kept, rs_metrics = rejection_keep(current, rollout, mask, s.rejection)
        metrics.update(rs_metrics)
    if s.loss_type == "ppo":
        pl = policy_loss(
            log_probs,
            rollout,
            advantages,
            kept,
            loss_type="ppo",
            clip_eps_low=s.clip_eps_low,
            clip_eps_high=s.clip_eps_high,
            dual_clip=s.dual_clip,
            aggregation=s.aggregation,
            norm=norm,
            params=s.params,
            verl_metrics=s.verl_metrics,
        )
    else:
        pl = policy_loss(
            log_probs,
            current,  # the IS weights' numerator: the current policy, as veRL's bypass weights
            advantages,
            kept,
            loss_type="gpg",
            rollout_log_probs=rollout,
            is_correction=s.is_correction,
            aggregation=s.aggregation,
            norm=norm,
            params=s.params,
            is_mask=mask,  # veRL computes the weights over the response mask before rejection
        )
        if s.verl_metrics:
            pl = replace(pl, verl=reinforce_metrics(current, rollout, kept))
    with torch.no_grad():
        ppo_kl = masked_mean(rollout - current, kept)
    return replace(pl, ppo_kl=ppo_kl), metrics


def policy_loss_metrics(pl: PolicyLossOutput) -> dict[str, Tensor]:
    """The micro-batch's metrics of the policy loss: ours (``policy_loss``, ``ppo_clip_ratio``, ``ppo_kl``, and
    ``rollout_kl``, ``is_filter_ratio`` where computed), and with logging.verl_metrics veRL's, under its names
    (``actor/pg_clipfrac``, ...), which the loop logs without the ``train/`` prefix. Each is averaged over the
    step's micro-batches and ranks, then over the optimizer steps of the rollout."""
    out = {"policy_loss": pl.loss.detach(), "ppo_clip_ratio": pl.clip_ratio, "ppo_kl": pl.ppo_kl}
    if pl.rollout_kl is not None:
        out["rollout_kl"] = pl.rollout_kl
    if pl.is_filter_ratio is not None:
        out["is_filter_ratio"] = pl.is_filter_ratio
    out.update(pl.verl or {})
    return out


def actor_loss_fn(model, mb: dict[str, Tensor], norm, *, s: ActorLossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """``L_pg + kl_coef·agg(KL) [KL as loss] − entropy_coef·agg(H)`` on one micro-batch (OpenRLHF
    ActorPPOTrainer.training_step), aggregated over the whole optimizer step by ``norm``."""
    mask = mb["action_mask"]
    if s.norm_from_width:
        norm = width_normalizer(norm, mask)
    # The logged entropy is always the sampled distribution's (logits / temperature); the bonus's is that one too
    # under entropy_logits=tempered (veRL), else the untempered logits' (OpenRLHF), a second entropy only when the
    # temperature is not 1.
    bonus_at = s.temperature if s.entropy_tempered else 1.0
    temps = (s.temperature,) if s.entropy_coef is None or bonus_at == s.temperature else (s.temperature, bonus_at)
    # only the bonus's entropy has a gradient (none without a coefficient): the logged one costs no backward
    grads = (bool(s.entropy_coef),) if len(temps) == 1 else (False, bool(s.entropy_coef))
    out = causal_lm_scores(
        model,
        mb["sequences"],
        mb["attention_mask"],
        temperature=s.temperature,
        entropy_temperatures=temps,
        entropy_grads=grads,
        packing=s.packing,
    )
    log_probs, sampled = out.log_probs, out.entropies[0]
    entropy = None if s.entropy_coef is None else out.entropies[-1]
    metrics: dict[str, Tensor | float] = dict(forward_tokens(model, mb["attention_mask"], packing=s.packing))
    old = mb.get("old_logprobs")
    if old is None:
        # One optimizer step per rollout (RLWorkers.reuses_current_logprobs): the weights that would recompute the
        # old log-probs are these very weights, so the detached current ones are the old ones (ratio 1) and the
        # separate forward pass is skipped. The experience pass's metrics that need them are computed here.
        old = log_probs.detach()
        with torch.no_grad():
            if "rollout_logprobs" in mb:
                metrics["logprobs_diff"] = masked_mean((old - mb["rollout_logprobs"]).abs(), mask)
            if "ref_logprobs" in mb:
                kl = compute_approx_kl(old, mb["ref_logprobs"], s.kl_estimator, clamp_k3_only=s.kl_clamp_k3_only)
                metrics["kl"] = masked_mean(kl, mask)
    if s.bypass:
        pl, bypass_metrics = bypass_policy_loss(log_probs, mb["rollout_logprobs"], mb["advantages"], mask, norm, s)
        metrics.update(bypass_metrics)
    else:
        pl = policy_loss(
            log_probs,
            old,
            mb["advantages"],
            mask,
            loss_type=s.loss_type,
            clip_eps_low=s.clip_eps_low,
            clip_eps_high=s.clip_eps_high,
            dual_clip=s.dual_clip,
            rollout_log_probs=mb.get("rollout_logprobs"),
            is_correction=s.is_correction,
            aggregation=s.aggregation,
            norm=norm,
            params=s.params,
            is_batch_totals=mb.get("is_weight_totals"),
            is_mask=mb.get("generated_mask"),
            verl_metrics=s.verl_metrics,
        )
    loss = pl.loss
    metrics.update(policy_loss_metrics(pl))
    if s.kl_in_loss:
        kl_coef = float(mb["kl_coef"].reshape(-1)[0])
        kl_term = kl_loss(
            log_probs,
            mb["ref_logprobs"],
            mask,
            kl_coef,
            s.kl_estimator,
            s.terms_aggregation,
            norm,
            old_log_probs=old,
            unbiased_gradient=s.kl_unbiased_gradient,
            straight_through=s.kl_straight_through,
            clamp_k3_only=s.kl_clamp_k3_only,
        )
        loss = loss + kl_term
        metrics["kl_loss"] = kl_term.detach()
    with torch.no_grad():
        metrics["entropy"] = masked_mean(sampled, mask)
    if entropy is not None:
        with torch.no_grad():
            metrics["entropy_loss"] = masked_mean(entropy, mask)
        if s.entropy_coef:
            loss = loss + entropy_bonus(entropy, mask, s.entropy_coef, s.terms_aggregation, norm)
    return loss, metrics


def critic_loss_fn(
    model,
    mb: dict[str, Tensor],
    norm,
    *,
    clip: float | None,
    packing: bool = False,
    aggregation: str = "token_mean",
    norm_from_width: bool = False,
) -> tuple[Tensor, dict[str, Tensor | float]]:
    """The clipped value loss, aggregated by critic.aggregation (token mean: OpenRLHF; veRL's critic follows its
    loss_agg_mode)."""
    if norm_from_width:
        norm = width_normalizer(norm, mb["action_mask"])
    values = value_model_values(model, mb["sequences"], mb["attention_mask"], packing=packing).float()
    loss = value_loss(
        values, mb["values"], mb["returns"], mb["action_mask"], clip_eps=clip, aggregation=aggregation, norm=norm
    )
    with torch.no_grad():
        v = masked_mean(values, mb["action_mask"])
    return loss, {
        "critic_loss": loss.detach(),
        "values": v,
        **forward_tokens(model, mb["attention_mask"], packing=packing),
    }
