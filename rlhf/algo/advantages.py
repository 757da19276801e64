"""Advantage estimators: group baselines, GAE, discounted returns and whitening, in OpenRLHF's pipeline order.

OpenRLHF ``compute_advantages_and_returns`` in ``openrlhf/trainer/ppo_utils/experience_maker.py``:

    scalar rewards R[P, n] -> group baseline -> compute_reward (clip, KL, reward at the last action token)
        -> GAE (critic) or cumulative returns -> global whitening (for some estimators)

| estimator            | scalar reward used                  | token advantages | whitened |
|----------------------|-------------------------------------|------------------|----------|
| gae                  | r                                   | GAE with critic  | yes      |
| reinforce            | r                                   | return           | yes      |
| rloo                 | r_i - (Σ_j r_j - r_i) / (n - 1)     | return           | no       |
| reinforce_baseline   | r_i - mean(R)                       | return           | yes      |
| group_norm (GRPO)    | (r_i - mean(R)) / (std(R) + 1e-9)   | return           | no       |
| dr_grpo              | r_i - mean(R)                       | return           | no       |
| flash_reinforce      | r_i - mean of the whole batch       | return           | no       |
| opd                  | none: per-token teacher log-ratio   | return (γ = 0:   | yes      |
|                      | (rlhf.algo.distill)                 | the token's own) |          |
| gpg                  | α (r_i - mean(R)), α = B / #{r ≠ 0} | return           | no       |
| opo                  | r_i - Σ l_j r_j / Σ l_j (l: length) | return           | no       |
| grpo_passk           | best: (r_max - r_2nd) / (std + ε);  | return           | no       |
|                      | the others 0                        |                  |          |
| remax                | r_i - r(greedy response to prompt)  | return           | no       |
| optimal_token_       | r                                   | return minus a   | no       |
| baseline (and tir_)  |                                     | per-token group  |          |
|                      |                                     | baseline         |          |
|                      |                                     | (token_baseline) |          |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.kl import DEFAULT_REWARD_CLIP, compute_reward
from rlhf.algo.logprobs import masked_whiten
from rlhf.algo.registry import Registry
from rlhf.algo.token_baseline import TokenBaselineInputs, optimal_token_baseline_advantages
from rlhf.spec.names import ESTIMATOR_TRAITS, EstimatorTraits

# Added to the group std in GRPO's normalisation (OpenRLHF's value) so an all-equal group gives 0, not NaN.
GROUP_STD_EPS = 1e-9


@dataclass(frozen=True)
class AdvantageEstimator:
    """What the pipeline needs to know about an advantage estimator.

    Attributes:
        name: the config string.
        whiten: advantages are whitened over all tokens of the rollout batch.
        baseline: maps the scalar rewards ``R[P, n]`` (with the ``[P, n]`` scored mask or None, the group std's
            epsilon and the ``[P, n]`` response lengths) to the rewards used in ``compute_reward``; ``None`` = identity.
        traits: what it asks of the run (critic, groups of samples, gamma 1, teacher): ``rlhf.spec.names``'s table,
            the one declaration validation and the role list read too.
    """

    name: str
    whiten: bool
    baseline: Callable[[Tensor, Tensor | None, float, Tensor | None], Tensor] | None = None

    def __post_init__(self) -> None:
        if self.name not in ESTIMATOR_TRAITS:
            raise ValueError(
                f"advantage estimator {self.name!r} has no traits: add its line to rlhf.spec.names.ESTIMATOR_TRAITS"
            )

    @property
    def traits(self) -> EstimatorTraits:
        return ESTIMATOR_TRAITS[self.name]


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def _scored_count(rewards: Tensor, scored: Tensor) -> Tensor:
    """Per group, how many samples have a reward (``scored`` True), as ``rewards``' dtype, ``[P, 1]``."""
    return scored.sum(dim=-1, keepdim=True).to(rewards.dtype)


def rloo_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """RLOO: ``r_i - (Σ_j r_j - r_i) / (n - 1)``, the leave-one-out mean of the other samples, on ``R[P, n]``.

    ``scored`` (``[P, n]`` bool, False where every reward function declined the sample): the sums and n run over the
    scored samples only; an unscored sample, or one with no other scored sample in its group, gets 0."""
    if scored is None:
        n = rewards.size(-1)
        return rewards - (rewards.sum(dim=-1, keepdim=True) - rewards) / (n - 1)
    m = scored.to(rewards.dtype)
    k = _scored_count(rewards, scored)
    others = ((rewards * m).sum(dim=-1, keepdim=True) - rewards) / (k - 1).clamp(min=1)
    return torch.where(scored & (k > 1), rewards - others, torch.zeros_like(rewards))


def mean_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """REINFORCE++-baseline and Dr. GRPO: ``r_i - mean(R)`` over the group, on ``R[P, n]``; with ``scored``, the
    mean of the scored samples (TRL's nanmean) and 0 for the unscored ones."""
    if scored is None:
        return rewards - rewards.mean(dim=-1, keepdim=True)
    m = scored.to(rewards.dtype)
    mean = (rewards * m).sum(dim=-1, keepdim=True) / _scored_count(rewards, scored).clamp(min=1)
    return (rewards - mean) * m


def group_norm_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """GRPO: ``(r_i - mean(R)) / (std(R) + std_eps)`` with the *unbiased* (n - 1) std, on ``R[P, n]``; ``std_eps``
    1e-9 (OpenRLHF) or 1e-6 (veRL), ``algorithm.advantage.std_eps``. With ``scored``, mean and std over the scored
    samples (TRL's nanmean and nanstd) and 0 for the unscored ones; a group with one scored sample gives it 0."""
    if scored is None:
        return mean_baseline(rewards) / (rewards.std(dim=-1, keepdim=True) + std_eps)
    centred = mean_baseline(rewards, scored)
    k = _scored_count(rewards, scored)
    std = (centred.pow(2).sum(dim=-1, keepdim=True) / (k - 1).clamp(min=1)).sqrt()
    return centred / (std + std_eps)


def gpg_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """GPG (Group Policy Gradient, arXiv 2504.02546; veRL ``compute_gpg_outcome_advantage``): ``α (r_i - mean(R))``
    with ``α = B / max(#{non-zero rewards in the whole batch}, 1)``, which scales up the signal of a batch where most
    samples scored 0. ``R[P, n]`` is the whole rollout batch. With ``scored``, B and the count are over the scored
    samples only."""
    if scored is None:
        alpha = rewards.numel() / torch.count_nonzero(rewards).clamp(min=1)
        return alpha * mean_baseline(rewards)
    alpha = scored.sum() / torch.count_nonzero(rewards * scored).clamp(min=1)
    return alpha * mean_baseline(rewards, scored)


def opo_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """OPO (arXiv 2505.23585; veRL ``compute_opo_outcome_advantage``): ``r_i - Σ_j l_j r_j / Σ_j l_j``, the group's
    mean reward weighted by the response lengths ``l`` (``[P, n]``, the optimal baseline for sequence-level
    rewards), on ``R[P, n]``; with ``scored``, over the scored samples only (0 for the others)."""
    if lengths is None:
        raise ValueError("opo weighs its baseline by the response lengths: pass them")
    weights = lengths.to(rewards.dtype)
    if scored is not None:
        weights = weights * scored.to(rewards.dtype)
    baseline = (weights * rewards).sum(dim=-1, keepdim=True) / weights.sum(dim=-1, keepdim=True)
    out = rewards - baseline
    return out if scored is None else torch.where(scored, out, torch.zeros_like(out))


def passk_baseline(
    rewards: Tensor, scored: Tensor | None = None, std_eps: float = GROUP_STD_EPS, lengths: Tensor | None = None
) -> Tensor:
    """Pass@k GRPO (arXiv 2503.19595; veRL ``compute_grpo_passk_outcome_advantage``): only the best sample of each
    group gets an advantage, ``(r_max - r_second) / (std(R) + std_eps)`` (unbiased std, veRL's epsilon 1e-6 by
    ``algorithm.advantage.std_eps``); every other sample 0. Ties go to the first best (``torch.topk``). With
    ``scored``, among the scored samples only; a group with fewer than two of them gives 0."""
    if scored is None:
        top, idx = torch.topk(rewards, 2, dim=-1)
        gap = (top[:, :1] - top[:, 1:2]) / (rewards.std(dim=-1, keepdim=True) + std_eps)
        return torch.zeros_like(rewards).scatter(-1, idx[:, :1], gap)
    masked = torch.where(scored, rewards, torch.full_like(rewards, -torch.inf))
    top, idx = torch.topk(masked, 2, dim=-1)
    k = _scored_count(rewards, scored)
    centred = mean_baseline(rewards, scored)
    std = (centred.pow(2).sum(dim=-1, keepdim=True) / (k - 1).clamp(min=1)).sqrt()
    gap = torch.where(k > 1, (top[:, :1] - top[:, 1:2]) / (std + std_eps), torch.zeros_like(std))
    return torch.zeros_like(rewards).scatter(-1, idx[:, :1], gap)


for _estimator in (
    AdvantageEstimator("gae", whiten=True),
    AdvantageEstimator("reinforce", whiten=True),
    AdvantageEstimator("reinforce_baseline", whiten=True, baseline=mean_baseline),
    AdvantageEstimator("rloo", whiten=False, baseline=rloo_baseline),
    AdvantageEstimator("group_norm", whiten=False, baseline=group_norm_baseline),
    AdvantageEstimator("dr_grpo", whiten=False, baseline=mean_baseline),
    # FlashREINFORCE (OpenRLHF 0.11.2): mean_baseline over the batch seen as one group, r_i - mean(all rewards).
    AdvantageEstimator("flash_reinforce", whiten=False, baseline=mean_baseline),
    AdvantageEstimator("opd", whiten=True),
    AdvantageEstimator("gpg", whiten=False, baseline=gpg_baseline),
    AdvantageEstimator("opo", whiten=False, baseline=opo_baseline),
    AdvantageEstimator("grpo_passk", whiten=False, baseline=passk_baseline),
    # ReMax (arXiv 2310.10505): the baseline is an input, the greedy response's reward (greedy_rewards below).
    AdvantageEstimator("remax", whiten=False),
    # The optimal token baseline (veRL): a baseline per token, rlhf.algo.token_baseline.
    AdvantageEstimator("optimal_token_baseline", whiten=False),
    AdvantageEstimator("tir_optimal_token_baseline", whiten=False),
):
    ADVANTAGE_ESTIMATORS.add(_estimator.name, _estimator)


def apply_group_baseline(
    rewards: Tensor,
    estimator: AdvantageEstimator,
    n_samples_per_prompt: int,
    scored: Tensor | None = None,
    std_eps: float = GROUP_STD_EPS,
    lengths: Tensor | None = None,
) -> Tensor:
    """Scalar rewards ``[B]`` (the n samples of a prompt contiguous) after the estimator's group baseline (or its
    batch baseline: the whole batch as one group). ``scored``: ``[B]`` bool, False for a sample no reward function
    scored, which is left out of its group's statistics; ``lengths``: ``[B]`` response lengths (opo)."""
    if estimator.baseline is None:
        return rewards
    shape = (1, -1) if estimator.traits.batch_baseline else (-1, n_samples_per_prompt)
    if not estimator.traits.batch_baseline:
        if n_samples_per_prompt < 2:
            raise ValueError(f"{estimator.name} compares the samples of a prompt: n_samples_per_prompt must be >= 2")
        if rewards.numel() % n_samples_per_prompt:
            raise ValueError(f"{rewards.numel()} rewards do not split into groups of {n_samples_per_prompt}")
    grouped_scored = None if scored is None else scored.reshape(shape)
    grouped_lengths = None if lengths is None else lengths.reshape(shape)
    return estimator.baseline(rewards.reshape(shape), grouped_scored, std_eps, grouped_lengths).reshape(-1)


def gae_advantages_and_returns(
    values: Tensor, rewards: Tensor, action_mask: Tensor, gamma: float, lambd: float, skip_masked: bool = False
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (OpenRLHF ``get_advantages_and_returns``):

    ``V = m·V, r = m·r; δ_t = r_t + γ V_{t+1} - V_t (V_T = 0); A_t = δ_t + γ λ A_{t+1}; returns = A + V``.

    ``skip_masked`` (veRL ``compute_gae_advantage_return``): a masked token inside the response (a multi-turn
    episode's tool output) is stepped over, ``V_{t+1}`` and ``A_{t+1}`` being the next *unmasked* token's, instead of
    a zero-value step that γ and λ decay across. Trailing padding gives the same either way.

    Returns ``(advantages, returns)``, both ``[B, T]``; the returns are the critic's targets.
    """
    values = action_mask * values
    rewards = action_mask * rewards
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        step = delta + gamma * lambd * next_advantage
        if skip_masked:
            m = action_mask[:, t].to(rewards.dtype)
            next_advantage = step * m + (1 - m) * next_advantage
            next_value = values[:, t] * m + (1 - m) * next_value
        else:
            next_advantage = step
            next_value = values[:, t]
        advantages[:, t] = next_advantage
    return advantages, advantages + values


def cumulative_returns(rewards: Tensor, action_mask: Tensor, gamma: float, skip_masked: bool = False) -> Tensor:
    """Discounted returns ``G_t = m_t r_t + γ G_{t+1}`` (OpenRLHF ``get_cumulative_returns``); ``skip_masked``
    (veRL's REINFORCE++): a masked token gets 0 and passes ``G_{t+1}`` on undiscounted.

    With γ = 1 and the KL folded into the reward: ``G_t = r_final - kl_coef · Σ_{t' >= t} kl_{t'}`` (REINFORCE++).
    """
    rewards = action_mask * rewards
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        step = rewards[:, t] + gamma * running
        if skip_masked:
            m = action_mask[:, t].to(rewards.dtype)
            returns[:, t] = step * m
            running = step * m + (1 - m) * running
        else:
            running = step
            returns[:, t] = running
    return returns


@dataclass(frozen=True)
class AdvantageOutput:
    """Action-aligned ``[B, T]`` results of :func:`compute_advantages_and_returns`.

    Attributes:
        advantages: what the policy loss multiplies, after whitening where the estimator whitens.
        returns: GAE returns (critic targets) or cumulative returns, before whitening.
        rewards: the shaped per-token rewards (KL folded in, scalar reward at the last action token);
            ``rewards.sum(-1)`` is OpenRLHF's logged ``return``.
    """

    advantages: Tensor
    returns: Tensor
    rewards: Tensor


def compute_advantages_and_returns(
    rewards: Tensor,
    action_mask: Tensor,
    *,
    estimator: str,
    kl: Tensor | None = None,
    values: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    lambd: float = 1.0,
    n_samples_per_prompt: int = 1,
    reward_clip_range: tuple[float, float] | None = DEFAULT_REWARD_CLIP,
    no_std_norm: bool = False,
    teacher_rewards: Tensor | None = None,
    kl_before_baseline: bool = False,
    scored: Tensor | None = None,
    std_eps: float = GROUP_STD_EPS,
    whiten_unbiased: bool = False,
    skip_masked: bool = False,
    greedy_rewards: Tensor | None = None,
    token_baseline: TokenBaselineInputs | None = None,
) -> AdvantageOutput:
    """Advantages and returns for one rollout batch, in OpenRLHF's order (``compute_advantages_and_returns``):

    1. group baseline on ``R[P, n]`` (rloo, reinforce_baseline, group_norm, dr_grpo), or the whole batch's mean
       (flash_reinforce), in at least fp32;
    2. ``compute_reward``: reward clip, scalar at the last action token, ``-kl_coef · kl`` per token;
    3. GAE with the critic's values (gae) or cumulative returns, ``A = G`` (others); gamma is 1 for the estimators
       with a baseline;
    4. whitening over every action token of the batch, ``(A - μ) · rsqrt(clamp(σ², 1e-8))`` (gae, reinforce,
       reinforce_baseline; ``no_std_norm`` keeps only ``A - μ``).

    ``kl_before_baseline`` (veRL's ``use_kl_in_reward``), for an estimator with a baseline: step 1 takes the
    baseline of ``r_i - kl_coef · Σ_t kl_t`` and step 2 adds no per-token KL, so every token of a response gets the
    same advantage; other estimators are unchanged (veRL folds the KL per token there too).

    ``opd`` (on-policy distillation) replaces step 1: the scalar rewards are not used, and ``teacher_rewards``
    (:func:`rlhf.algo.distill.reverse_kl_rewards`) are added per token to what step 2 gives (a reference KL, if
    any); with γ = 0 each token's advantage is its own reward.

    ``scored`` (``[B]`` bool; None: all): False for a sample that every reward function declined (TRL's None
    reward). Such a sample is left out of its group's mean and std (TRL 1.16's nanmean/nanstd), of the batch-level
    statistics (gpg's count, flash_reinforce's mean, whitening) and gets a zero advantage on every token, whatever
    the estimator; its returns (a critic's targets) are computed from the reward it was given.

    Pass the *whole* rollout batch: the group baseline needs all n samples of each prompt and whitening uses the
    statistics of every token. Length penalties (:mod:`rlhf.algo.shaping`) are applied to ``rewards`` beforehand.

    Args:
        rewards: ``[B]`` scalar rewards, the n samples of each prompt contiguous (``B = P · n``).
        action_mask: ``[B, T]``.
        estimator: a name in ``ADVANTAGE_ESTIMATORS``.
        kl: ``[B, T]`` per-token KL (``compute_approx_kl``), or ``None`` (no reference, or KL used as a loss).
        values: ``[B, T]`` critic values, required by ``gae``.
        kl_coef: the KL controller's current value.
        gamma, lambd: discount and GAE λ.
        n_samples_per_prompt: n.
        reward_clip_range: clip applied to the post-baseline scalar reward; ``None`` disables it.
        no_std_norm: whiten by subtracting the mean only.
        teacher_rewards: ``[B, T]`` per-token distillation rewards, required by ``opd`` (and only used by it).
        kl_before_baseline: fold ``kl`` into the scalar reward before the baseline (see above).
        scored: ``[B]`` bool, which samples have a reward (see above).
        std_eps: added to the group std by group_norm and grpo_passk (``algorithm.advantage.std_eps``).
        whiten_unbiased: whiten by the N/(N-1) variance (veRL) instead of the population one (OpenRLHF).
        skip_masked: GAE and returns step over masked tokens inside a response (veRL) instead of through them.
        greedy_rewards: ``[B]`` the reward of a greedy response to each sample's prompt, required by ``remax``
            (ReMax, veRL ``compute_remax_outcome_advantage``): subtracted from the sample's reward, so every token's
            advantage is its return minus it.
        token_baseline: what the optimal token baseline reads of the old policy (:mod:`rlhf.algo.token_baseline`),
            required by ``optimal_token_baseline`` and ``tir_optimal_token_baseline``: each token's advantage is its
            return minus its group's path-variance-weighted return at that step.
    """
    spec = ADVANTAGE_ESTIMATORS.get(estimator)
    traits = spec.traits
    if traits.needs_critic and values is None:
        raise ValueError(f"advantage estimator {estimator!r} needs critic values")
    # OpenRLHF forces gamma to 1 for these estimators (with a warning); spec validation reports a configured != 1.
    gamma = 1.0 if traits.gamma_one else gamma
    if traits.teacher:
        if teacher_rewards is None:
            raise ValueError(f"advantage estimator {estimator!r} needs the teacher's per-token rewards")
        scalar = torch.zeros_like(rewards, dtype=torch.float32)  # the teacher is the whole training signal
    else:
        # At least fp32 (OpenRLHF 0.11.2 promotes the rewards before penalties and group statistics); fp64 stays.
        scalar = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
        if kl_before_baseline and spec.baseline is not None and kl is not None:
            # veRL: the sequence's summed KL leaves the score first; nothing is added per token afterwards.
            scalar = scalar - max(kl_coef, 0.0) * (kl * action_mask).sum(dim=-1).to(scalar.dtype)
            kl = None
        lengths = action_mask.sum(dim=-1)
        scalar = apply_group_baseline(scalar, spec, n_samples_per_prompt, scored, std_eps, lengths)
        if traits.greedy_baseline:
            if greedy_rewards is None:
                raise ValueError(f"advantage estimator {estimator!r} needs the greedy responses' rewards")
            scalar = scalar - greedy_rewards.to(scalar.dtype)
    token_rewards = compute_reward(scalar, kl_coef, kl, action_mask, reward_clip_range)
    if traits.teacher:
        token_rewards = token_rewards + teacher_rewards.float() * action_mask
    if traits.needs_critic:
        advantages, returns = gae_advantages_and_returns(
            values.float(), token_rewards, action_mask, gamma, lambd, skip_masked
        )
    else:
        returns = cumulative_returns(token_rewards, action_mask, gamma, skip_masked)
        advantages = returns.clone()
        if traits.token_baseline:
            if token_baseline is None:
                raise ValueError(f"advantage estimator {estimator!r} needs the old policy's log-probs and sum pi^2")
            advantages = optimal_token_baseline_advantages(
                returns,
                action_mask,
                token_baseline,
                n_samples_per_prompt,
                generated_steps_only=estimator == "tir_optimal_token_baseline",
            )
    if scored is not None:
        # An unscored sample carries no signal: out of the whitening statistics, and a zero advantage.
        keep = scored.reshape(-1, 1).to(action_mask.dtype)
        advantages = advantages * keep
        if spec.whiten and bool(scored.any()):
            advantages = masked_whiten(
                advantages, action_mask * keep, divide_by_std=not no_std_norm, unbiased=whiten_unbiased
            )
    elif spec.whiten:
        advantages = masked_whiten(advantages, action_mask, divide_by_std=not no_std_norm, unbiased=whiten_unbiased)
    return AdvantageOutput(advantages=advantages, returns=returns, rewards=token_rewards)
