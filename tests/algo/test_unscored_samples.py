"""A sample that every reward function declined (TRL's None, issue 34): left out of its group's mean and std and of
the batch's statistics, with a zero advantage, as TRL 1.16's GRPOTrainer (nanmean / nanstd, then nan_to_num).
Hand-computed on the group [1, 2, -, 6], whose third sample has no reward."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import compute_advantages_and_returns
from rlhf.algo.advantages import gpg_baseline, group_norm_baseline, mean_baseline, rloo_baseline
from rlhf.pipelines.rl import scored_mask
from rlhf.pipelines.rl_generation import Scored
from rlhf.rewards.combine import UNSCORED_LOG, combine
from rlhf.rewards.contracts import Scores

# The unscored sample's reward is a stand-in (its group's scored mean, as rlhf.rewards.combine fills it); any
# value must give the same advantages.
GROUP = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
SCORED = torch.tensor([[True, True, False, True]])


@pytest.mark.parametrize("stand_in", [3.0, -50.0])
def test_mean_baseline_leaves_the_unscored_sample_out(stand_in):
    rewards = GROUP.clone()
    rewards[0, 2] = stand_in
    assert mean_baseline(rewards, SCORED).tolist() == [[-2.0, -1.0, 0.0, 3.0]]


def test_group_norm_uses_the_scored_samples_unbiased_std():
    # deviations -2, -1, 3: sum of squares 14 over 3 - 1 -> std sqrt(7); without the mask the std would count 0
    s7 = math.sqrt(7)
    out = group_norm_baseline(GROUP, SCORED, std_eps=0.0).tolist()[0]
    assert out == pytest.approx([-2 / s7, -1 / s7, 0.0, 3 / s7])
    assert group_norm_baseline(GROUP).tolist()[0] != pytest.approx(out)


def test_rloo_leaves_one_out_of_the_scored_samples():
    # k = 3 scored, their sum 9: r_i - (9 - r_i) / 2
    assert rloo_baseline(GROUP, SCORED).tolist() == [[1 - 4.0, 2 - 3.5, 0.0, 6 - 1.5]]


def test_a_group_with_one_scored_sample_gives_it_zero():
    scored = torch.tensor([[False, True, False, False]])
    for fn in (mean_baseline, rloo_baseline, group_norm_baseline):
        assert fn(GROUP, scored).tolist() == [[0.0] * 4]


def test_gpg_counts_only_scored_samples():
    # scored rewards 0, 2, 0: alpha = 3 scored / 1 non-zero = 3, mean 2/3
    rewards = torch.tensor([[0.0, 2.0, 5.0, 0.0]])
    out = gpg_baseline(rewards, SCORED).tolist()[0]
    assert out == pytest.approx([3 * -2 / 3, 3 * 4 / 3, 0.0, 3 * -2 / 3])


def _trl_advantages(rewards: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, scale_rewards="group": NaN rewards for the unscored,
    nanmean and nanstd (Bessel-corrected) per group, (r - mean) / (std + 1e-4), then nan_to_num."""
    grouped = rewards.view(-1, n)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    count = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    var = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True) * count / (count - 1)
    var = torch.where(count > 1, var, torch.full_like(var, float("nan")))
    return torch.nan_to_num((grouped - mean) / (var.sqrt() + eps), nan=0.0).view(-1)


@pytest.mark.parametrize("seed", range(3))
def test_grpo_with_declined_samples_matches_trls_formula(seed):
    g = torch.Generator().manual_seed(seed)
    n, prompts, width = 4, 5, 6
    rewards = torch.randn(n * prompts, generator=g)
    scored = torch.rand(n * prompts, generator=g) > 0.3
    scored[:n] = torch.tensor([False, True, False, False])  # one group with a single scored sample
    mask = torch.ones(n * prompts, width)
    theirs = _trl_advantages(torch.where(scored, rewards, torch.nan), n, 1e-4)
    ours = compute_advantages_and_returns(
        rewards,
        mask,
        estimator="group_norm",
        n_samples_per_prompt=n,
        reward_clip_range=None,
        scored=scored,
        std_eps=1e-4,
    ).advantages
    torch.testing.assert_close(ours, theirs.unsqueeze(1).expand(-1, width))


def test_whitening_statistics_leave_the_unscored_out():
    # reinforce_baseline on [1, 2, -, 6]: baseline -> [-2, -1, 0, 3] for the scored; whitened over their tokens only
    mask = torch.ones(4, 2)
    scored = SCORED.reshape(-1)
    out = compute_advantages_and_returns(
        GROUP.reshape(-1), mask, estimator="reinforce_baseline", n_samples_per_prompt=4, scored=scored
    ).advantages
    kept = torch.tensor([-2.0, -1.0, 3.0])
    mean, var = kept.mean(), kept.var(unbiased=False)  # population variance over the 6 scored tokens, as ours
    expected = ((kept - mean) / var.sqrt()).tolist()
    assert out[:, 0].tolist() == pytest.approx([expected[0], expected[1], 0.0, expected[2]], abs=1e-6)
    assert out[2].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("estimator", ["reinforce", "dr_grpo", "rloo", "flash_reinforce", "gpg"])
def test_the_unscored_sample_gets_zero_advantage_under_every_estimator(estimator):
    mask = torch.ones(4, 3)
    kl = torch.full((4, 3), 0.1)
    out = compute_advantages_and_returns(
        GROUP.reshape(-1),
        mask,
        estimator=estimator,
        kl=kl,
        kl_coef=0.1,
        n_samples_per_prompt=4,
        scored=SCORED.reshape(-1),
    ).advantages
    assert out[2].abs().sum() == 0
    assert out[0].abs().sum() > 0


def test_without_a_mask_the_figures_are_unchanged():
    mask = torch.ones(4, 3)
    args = {"estimator": "group_norm", "n_samples_per_prompt": 4}
    plain = compute_advantages_and_returns(GROUP.reshape(-1), mask, **args).advantages
    all_scored = compute_advantages_and_returns(
        GROUP.reshape(-1), mask, scored=torch.ones(4, dtype=torch.bool), **args
    ).advantages
    torch.testing.assert_close(plain, all_scored)


def test_the_rl_loop_reads_the_mask_from_the_combined_rewards():
    declined = combine([Scores([1.0, math.nan, 0.0, 2.0])], ["f"], [1.0], group_size=2)
    assert declined.extra_logs[UNSCORED_LOG] == [0.0, 1.0, 0.0, 0.0]
    assert "reward/f" not in declined.extra_logs  # one function: no per-function log unless asked
    s = Scored([None] * 4, [{}] * 4, declined.rewards, declined.scores, declined.extra_logs)
    assert scored_mask(s).tolist() == [True, False, True, True]
    every = combine([Scores([1.0, 0.5])], ["f"], [1.0], group_size=2)
    assert UNSCORED_LOG not in every.extra_logs
    assert scored_mask(Scored([None] * 2, [{}] * 2, every.rewards, every.scores, every.extra_logs)) is None
