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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.kl import DEFAULT_REWARD_CLIP, compute_reward
from rlhf.algo.logprobs import masked_whiten
from rlhf.algo.registry import Registry
from rlhf.spec.names import ESTIMATOR_TRAITS, EstimatorTraits

# Added to the group std in GRPO's normalisation (OpenRLHF's value) so an all-equal group gives 0, not NaN.
GROUP_STD_EPS = 1e-9


@dataclass(frozen=True)
class AdvantageEstimator:
    """What the pipeline needs to know about an advantage estimator.

    Attributes:
        name: the config string.
        whiten: advantages are whitened over all tokens of the rollout batch.
        baseline: maps the scalar rewards ``R[P, n]`` to the rewards used in ``compute_reward``; ``None`` = identity.
        traits: what it asks of the run (critic, groups of samples, gamma 1, teacher): ``rlhf.spec.names``'s table,
            the one declaration validation and the role list read too.
    """

    name: str
    whiten: bool
    baseline: Callable[[Tensor], Tensor] | None = None

    def __post_init__(self) -> None:
        if self.name not in ESTIMATOR_TRAITS:
            raise ValueError(
                f"advantage estimator {self.name!r} has no traits: add its line to rlhf.spec.names.ESTIMATOR_TRAITS"
            )

    @property
    def traits(self) -> EstimatorTraits:
        return ESTIMATOR_TRAITS[self.name]


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def rloo_baseline(rewards: Tensor) -> Tensor:
    """RLOO: ``r_i - (Σ_j r_j - r_i) / (n - 1)``, the leave-one-out mean of the other samples, on ``R[P, n]``."""
    n = rewards.size(-1)
    return rewards - (rewards.sum(dim=-1, keepdim=True) - rewards) / (n - 1)


def mean_baseline(rewards: Tensor) -> Tensor:
    """REINFORCE++-baseline and Dr. GRPO: ``r_i - mean(R)`` over the group, on ``R[P, n]``."""
    return rewards - rewards.mean(dim=-1, keepdim=True)


def group_norm_baseline(rewards: Tensor) -> Tensor:
    """GRPO: ``(r_i - mean(R)) / (std(R) + 1e-9)`` with the *unbiased* (n - 1) std, on ``R[P, n]``."""
    return mean_baseline(rewards) / (rewards.std(dim=-1, keepdim=True) + GROUP_STD_EPS)


def gpg_baseline(rewards: Tensor) -> Tensor:
    """GPG (Group Policy Gradient, arXiv 2504.02546; veRL ``compute_gpg_outcome_advantage``): ``α (r_i - mean(R))``
    with ``α = B / max(#{non-zero rewards in the whole batch}, 1)``, which scales up the signal of a batch where most
    samples scored 0. ``R[P, n]`` is the whole rollout batch."""
    alpha = rewards.numel() / torch.count_nonzero(rewards).clamp(min=1)
    return alpha * mean_baseline(rewards)


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
):
    ADVANTAGE_ESTIMATORS.add(_estimator.name, _estimator)


def apply_group_baseline(rewards: Tensor, estimator: AdvantageEstimator, n_samples_per_prompt: int) -> Tensor:
    """Scalar rewards ``[B]`` (the n samples of a prompt contiguous) after the estimator's group baseline (or its
    batch baseline: the whole batch as one group)."""
    if estimator.baseline is None:
        return rewards
    if estimator.traits.batch_baseline:
        return estimator.baseline(rewards.reshape(1, -1)).reshape(-1)
    if n_samples_per_prompt < 2:
        raise ValueError(f"{estimator.name} compares the samples of a prompt: n_samples_per_prompt must be >= 2")
    if rewards.numel() % n_samples_per_prompt:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {n_samples_per_prompt}")
    return estimator.baseline(rewards.reshape(-1, n_samples_per_prompt)).reshape(-1)


def gae_advantages_and_returns(
    values: Tensor, rewards: Tensor, action_mask: Tensor, gamma: float, lambd: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (OpenRLHF ``get_advantages_and_returns``):

    ``V = m·V, r = m·r; δ_t = r_t + γ V_{t+1} - V_t (V_T = 0); A_t = δ_t + γ λ A_{t+1}; returns = A + V``.

    Returns ``(advantages, returns)``, both ``[B, T]``; the returns are the critic's targets.
    """
    values = action_mask * values
    rewards = action_mask * rewards
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = delta + gamma * lambd * next_advantage
        advantages[:, t] = next_advantage
        next_value = values[:, t]
    return advantages, advantages + values


def cumulative_returns(rewards: Tensor, action_mask: Tensor, gamma: float) -> Tensor:
    """Discounted returns ``G_t = m_t r_t + γ G_{t+1}`` (OpenRLHF ``get_cumulative_returns``).

    With γ = 1 and the KL folded into the reward: ``G_t = r_final - kl_coef · Σ_{t' >= t} kl_{t'}`` (REINFORCE++).
    """
    rewards = action_mask * rewards
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        running = rewards[:, t] + gamma * running
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
        scalar = apply_group_baseline(scalar, spec, n_samples_per_prompt)
    token_rewards = compute_reward(scalar, kl_coef, kl, action_mask, reward_clip_range)
    if traits.teacher:
        token_rewards = token_rewards + teacher_rewards.float() * action_mask
    if traits.needs_critic:
        advantages, returns = gae_advantages_and_returns(values.float(), token_rewards, action_mask, gamma, lambd)
    else:
        returns = cumulative_returns(token_rewards, action_mask, gamma)
        advantages = returns.clone()
    if spec.whiten:
        advantages = masked_whiten(advantages, action_mask, divide_by_std=not no_std_norm)
    return AdvantageOutput(advantages=advantages, returns=returns, rewards=token_rewards)
