"""Group baselines, GAE, discounted returns, whitening rules and OpenRLHF's pipeline order, by hand."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from algo_helpers import garble, random_mask, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages_and_returns,
    cumulative_returns,
    gae_advantages_and_returns,
    group_norm_baseline,
    mean_baseline,
    rloo_baseline,
)

GROUP = torch.tensor([[1.0, 2.0, 3.0, 6.0]])  # mean 3, deviations [-2, -1, 0, 3]


def test_rloo_subtracts_mean_of_the_other_samples() -> None:
    # r_i - (12 - r_i) / 3
    assert rloo_baseline(GROUP).tolist()[0] == pytest.approx([1 - 11 / 3, 2 - 10 / 3, 3 - 3, 6 - 2])


def test_mean_baseline_subtracts_group_mean() -> None:
    assert mean_baseline(GROUP).tolist()[0] == pytest.approx([-2.0, -1.0, 0.0, 3.0])


def test_group_norm_divides_by_unbiased_std() -> None:
    std = math.sqrt((4 + 1 + 0 + 9) / 3)  # n - 1 in the denominator
    assert group_norm_baseline(GROUP).tolist()[0] == pytest.approx([d / std for d in [-2, -1, 0, 3]], abs=1e-6)


def test_group_norm_of_identical_rewards_is_zero_not_nan() -> None:
    assert group_norm_baseline(torch.full((1, 4), 0.7)).tolist() == [[0.0] * 4]


@pytest.mark.parametrize(
    ("name", "needs_critic", "is_group", "whiten"),
    [
        ("gae", True, False, True),
        ("reinforce", False, False, True),
        ("reinforce_baseline", False, True, True),
        ("rloo", False, True, False),
        ("group_norm", False, True, False),
        ("dr_grpo", False, True, False),
        ("flash_reinforce", False, False, False),
        ("opd", False, False, True),
    ],
)
def test_estimator_table(name: str, needs_critic: bool, is_group: bool, whiten: bool) -> None:
    spec = ADVANTAGE_ESTIMATORS.get(name)
    traits = spec.traits
    assert (traits.needs_critic, traits.is_group, spec.whiten) == (needs_critic, is_group, whiten)
    assert (spec.baseline is not None) == (is_group or traits.batch_baseline)
    assert traits.batch_baseline == (name == "flash_reinforce")
    assert traits.gamma_one == (is_group or name == "flash_reinforce")


def test_flash_reinforce_subtracts_the_whole_batch_mean_with_one_sample_per_prompt() -> None:
    # Five prompts, one sample each: mean 0.6, no whitening, every token of a sample carries its scalar.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    out = compute_advantages_and_returns(rewards, torch.ones(5, 2), estimator="flash_reinforce")
    assert out.advantages.tolist() == [pytest.approx([r - 0.6] * 2) for r in rewards.tolist()]


def test_flash_reinforce_ignores_the_groups_and_keeps_per_token_kl_credit() -> None:
    # n = 2 groups [1, 0] and [1, 1]: the baseline is still the mean of all four (0.75), not each group's; the
    # KL in the reward is credited per token (gamma 1) and nothing is whitened.
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    kl = torch.tensor([[0.5, 1.0]]).repeat(4, 1)
    out = compute_advantages_and_returns(
        rewards, torch.ones(4, 2), estimator="flash_reinforce", kl=kl, kl_coef=0.1, n_samples_per_prompt=2
    )
    expected = [[r - 0.75 - 0.15, r - 0.75 - 0.1] for r in rewards.tolist()]
    assert out.advantages.tolist() == [pytest.approx(row) for row in expected]


def test_fp64_rewards_keep_their_precision_through_the_baseline() -> None:
    # OpenRLHF 0.11.2 promotes the rewards to at least fp32 (promote_types) instead of casting them to fp32: the
    # group statistics of fp64 rewards stay fp64. In fp32 1 + 1e-12 == 1 and both advantages would be exactly 0.
    rewards = torch.tensor([1.0 + 1e-12, 1.0], dtype=torch.float64)
    out = compute_advantages_and_returns(rewards, torch.ones(2, 1), estimator="dr_grpo", n_samples_per_prompt=2)
    assert out.advantages[:, 0].tolist() == pytest.approx([0.5e-12, -0.5e-12], rel=1e-3)


def test_gae_undiscounted() -> None:
    # δ = [0 + .5 - .5, 0 + .5 - .5, 1 + 0 - .5] = [0, 0, .5]; γλ = 1 accumulates to A = [.5, .5, .5].
    adv, ret = gae_advantages_and_returns(
        torch.full((1, 3), 0.5), torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3), 1.0, 1.0
    )
    assert adv.tolist()[0] == pytest.approx([0.5, 0.5, 0.5])
    assert ret.tolist()[0] == pytest.approx([1.0, 1.0, 1.0])


def test_gae_discounted() -> None:
    # γ = 0.9, λ = 0.5: δ = [-.05, -.05, .5]; A_2 = .5, A_1 = -.05 + .45 * .5, A_0 = -.05 + .45 * A_1.
    adv, ret = gae_advantages_and_returns(
        torch.full((1, 3), 0.5), torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3), 0.9, 0.5
    )
    a1 = -0.05 + 0.45 * 0.5
    a0 = -0.05 + 0.45 * a1
    assert adv.tolist()[0] == pytest.approx([a0, a1, 0.5])
    assert ret.tolist()[0] == pytest.approx([a0 + 0.5, a1 + 0.5, 1.0])


def test_gae_treats_masked_values_and_rewards_as_zero() -> None:
    # The padded position's garbage value must not be bootstrapped: V_2 = 0, r_2 = 0.
    adv, _ = gae_advantages_and_returns(
        torch.tensor([[0.5, 0.5, 99.0]]), torch.tensor([[0.0, 1.0, 42.0]]), torch.tensor([[1.0, 1.0, 0.0]]), 1.0, 1.0
    )
    assert adv.tolist()[0] == pytest.approx([0.5, 0.5, 0.0])


def test_cumulative_returns_discount() -> None:
    ret = cumulative_returns(torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3), 0.5)
    assert ret.tolist()[0] == pytest.approx([1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0])


def test_grpo_pipeline_by_hand() -> None:
    # Two prompts, n = 2; no KL: every action token carries the sample's normalised reward.
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    out = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0, 5.0, 5.0]), mask, estimator="group_norm", n_samples_per_prompt=2
    )
    a = 0.5 / math.sqrt(0.5)  # deviation 0.5, unbiased std sqrt(0.5)
    expected = [[a, a, a], [-a, -a, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    torch.testing.assert_close(out.advantages, torch.tensor(expected))
    torch.testing.assert_close(out.returns, out.advantages)
    torch.testing.assert_close(out.rewards, torch.tensor([[0, 0, a], [0, -a, 0], [0, 0, 0], [0, 0, 0]]))


def test_reward_clip_acts_after_the_group_baseline() -> None:
    # rloo of [30, 10] is [20, -20], clipped to [10, -10]; clipping first would give [10, 10] -> [0, 0].
    out = compute_advantages_and_returns(
        torch.tensor([30.0, 10.0]), torch.ones(2, 1), estimator="rloo", n_samples_per_prompt=2
    )
    assert out.advantages.tolist() == [[10.0], [-10.0]]


def test_reinforce_pp_gives_per_token_kl_credit_then_whitens() -> None:
    # γ = 1: G_t = r - 0.1 * Σ_{t' >= t} kl = 1 - 0.1 * [6, 5, 3].
    out = compute_advantages_and_returns(
        torch.tensor([1.0]), torch.ones(1, 3), estimator="reinforce", kl=torch.tensor([[1.0, 2.0, 3.0]]), kl_coef=0.1
    )
    returns = [0.4, 0.5, 0.7]
    assert out.returns.tolist()[0] == pytest.approx(returns)
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    assert out.advantages.tolist()[0] == pytest.approx([(g - mean) / std for g in returns], abs=1e-5)


def test_no_std_norm_only_centres() -> None:
    out = compute_advantages_and_returns(
        torch.tensor([1.0]),
        torch.ones(1, 3),
        estimator="reinforce",
        kl=torch.tensor([[1.0, 2.0, 3.0]]),
        kl_coef=0.1,
        no_std_norm=True,
    )
    assert out.advantages.tolist()[0] == pytest.approx([0.4 - 0.5 - 1 / 30, 0.5 - 0.5 - 1 / 30, 0.7 - 0.5 - 1 / 30])


@pytest.mark.parametrize(
    "name", ["gae", "reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo", "flash_reinforce"]
)
def test_whitening_rule_per_estimator(name: str) -> None:
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]] * 2)
    out = compute_advantages_and_returns(
        torch.rand(4, generator=g),
        mask,
        estimator=name,
        kl=torch.rand(4, 4, generator=g),
        kl_coef=0.1,
        values=torch.rand(4, 4, generator=g),
        n_samples_per_prompt=2,
    )
    if ADVANTAGE_ESTIMATORS.get(name).whiten:
        tokens = out.advantages[mask.bool()]
        assert tokens.mean().item() == pytest.approx(0.0, abs=1e-6)
        assert tokens.var(unbiased=False).item() == pytest.approx(1.0, abs=1e-5)
    else:
        torch.testing.assert_close(out.advantages, out.returns)


@pytest.mark.parametrize("name", ["dr_grpo", "flash_reinforce"])
def test_gamma_is_forced_to_one_for_the_estimators_with_a_baseline(name: str) -> None:
    kwargs = dict(estimator=name, kl=torch.ones(2, 3), kl_coef=0.1, n_samples_per_prompt=2)
    one = compute_advantages_and_returns(torch.tensor([1.0, 0.0]), torch.ones(2, 3), gamma=1.0, **kwargs)
    half = compute_advantages_and_returns(torch.tensor([1.0, 0.0]), torch.ones(2, 3), gamma=0.5, **kwargs)
    torch.testing.assert_close(one.advantages, half.advantages)


def test_reinforce_keeps_its_gamma() -> None:
    out = compute_advantages_and_returns(torch.tensor([2.0]), torch.ones(1, 3), estimator="reinforce", gamma=0.5)
    assert out.returns.tolist()[0] == pytest.approx([0.5, 1.0, 2.0])


def test_gae_pipeline_returns_are_critic_targets_before_whitening() -> None:
    values = torch.full((1, 3), 0.5)
    out = compute_advantages_and_returns(
        torch.tensor([1.0]), torch.ones(1, 3), estimator="gae", values=values, gamma=0.9, lambd=0.5
    )
    _, ret = gae_advantages_and_returns(values, torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3), 0.9, 0.5)
    torch.testing.assert_close(out.returns, ret)


def test_invalid_inputs_fail_clearly() -> None:
    with pytest.raises(ValueError, match="needs critic values"):
        compute_advantages_and_returns(torch.ones(2), torch.ones(2, 2), estimator="gae")
    with pytest.raises(ValueError, match="n_samples_per_prompt must be >= 2"):
        compute_advantages_and_returns(torch.ones(2), torch.ones(2, 2), estimator="rloo", n_samples_per_prompt=1)
    with pytest.raises(ValueError, match="groups of 2"):
        compute_advantages_and_returns(torch.ones(3), torch.ones(3, 2), estimator="rloo", n_samples_per_prompt=2)


GROUPS = st.integers(2, 6).flatmap(
    lambda n: st.lists(st.lists(st.floats(-4.0, 4.0, allow_nan=False), min_size=n, max_size=n), min_size=1, max_size=3)
)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["group_norm", "dr_grpo", "rloo"]), GROUPS)
def test_group_advantages_have_zero_mean_within_each_group(name: str, groups: list[list[float]]) -> None:
    n = len(groups[0])
    # float64: near-equal rewards (1.5, 1.508, 1.515) lose ~1e-5 of their whitened mean to float32 cancellation,
    # which says nothing about the estimator (rewards keep their float64 through it)
    rewards = torch.tensor(groups, dtype=torch.float64).reshape(-1)
    out = compute_advantages_and_returns(rewards, torch.ones(len(rewards), 3), estimator=name, n_samples_per_prompt=n)
    # Without KL every token of a sample carries its scalar advantage.
    per_group = out.advantages[:, 0].reshape(-1, n).mean(dim=-1)
    torch.testing.assert_close(per_group, torch.zeros_like(per_group), atol=1e-5, rtol=0)


@settings(max_examples=30, deadline=None)
@given(
    seeds,
    st.sampled_from(["gae", "reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo", "flash_reinforce"]),
)
def test_padding_and_masked_positions_never_change_advantages(seed: int, name: str) -> None:
    g = torch.Generator().manual_seed(seed)
    batch, length = 4, 5
    mask = random_mask(g, batch, length)
    rewards = torch.randn(batch, generator=g)
    kl, values = torch.randn(batch, length, generator=g), torch.randn(batch, length, generator=g)
    kwargs = dict(estimator=name, kl_coef=0.05, gamma=0.9, lambd=0.8, n_samples_per_prompt=2)
    clean = compute_advantages_and_returns(rewards, mask, kl=kl * mask, values=values * mask, **kwargs)
    dirty = compute_advantages_and_returns(
        rewards, mask, kl=garble(kl, mask, g), values=garble(values, mask, g), **kwargs
    )
    pad = torch.zeros(batch, 3)
    padded = compute_advantages_and_returns(
        rewards,
        torch.cat([mask, pad], 1),
        kl=torch.cat([kl, pad + 5], 1),
        values=torch.cat([values, pad - 5], 1),
        **kwargs,
    )
    on = mask.bool()
    for out in (dirty, padded):
        torch.testing.assert_close(out.advantages[:, :length][on], clean.advantages[on])
        torch.testing.assert_close(out.returns[:, :length][on], clean.returns[on])


def test_an_estimator_without_traits_is_refused_naming_where_they_go() -> None:
    # What an estimator asks of the run is declared once, in rlhf.spec.names; algo adds only the numerics.
    with pytest.raises(ValueError, match=r"rlhf\.spec\.names\.ESTIMATOR_TRAITS"):
        AdvantageEstimator("my_estimator", whiten=True)
