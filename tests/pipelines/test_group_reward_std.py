"""group_reward_std as OpenRLHF logs it: the unbiased std of each prompt's shaped rewards, averaged per sample."""

from __future__ import annotations

import math

import pytest

from rlhf.backends.contract.rollout import Rollout
from rlhf.pipelines.rl import Scored, make_experience
from rlhf.pipelines.rl_metrics import group_reward_std
from rlhf.spec.build import load_spec


def test_group_reward_std_is_the_mean_of_unbiased_group_stds():
    # group 1: [1, 0, 0, 1] mean 0.5, unbiased var 4 * 0.25 / 3 = 1/3; group 2: constant, std 0
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert group_reward_std(rewards, 4) == pytest.approx(math.sqrt(1 / 3) / 2)
    # two samples [0, 1]: unbiased std sqrt(0.5), where the population std would be 0.5
    assert group_reward_std([0.0, 1.0], 2) == pytest.approx(math.sqrt(0.5))


def test_group_reward_std_is_zero_with_one_sample_per_prompt():
    assert group_reward_std([0.3, 0.9, 0.1], 1) == 0.0


def test_group_reward_std_refuses_a_partial_group():
    with pytest.raises(ValueError, match="groups of 2"):
        group_reward_std([0.0, 1.0, 1.0], 2)


class _NoRoles:
    """Stands in for the worker group: no reference, no critic, nothing to recompute (pure experience math)."""

    def make_experience(self, exp):
        return {}


def test_make_experience_logs_the_std_of_the_penalised_rewards():
    spec = load_spec(
        [
            "algorithm=dapo",
            "rollout.samples_per_prompt=2",
            "rollout.max_new_tokens=8",
            "algorithm.filters.overlong_buffer_len=4",
            "algorithm.filters.overlong_penalty_factor=1.0",
            "algorithm.kl.coef=0",
        ]
    )

    def rollout(n_tokens: int) -> Rollout:
        return Rollout([1, 2], [3] * n_tokens, [1] * n_tokens, [0.0] * n_tokens, "stop")

    # Both samples are right (reward 1); the second is 2 tokens into the 4-token overlong buffer (8 - 4 = 4
    # expected): penalty -2/4 * 1.0, so the shaped rewards are [1.0, 0.5] while the raw ones have no spread.
    rollouts = [rollout(4), rollout(6)]
    rows = [{"datasource": "t", "prompt": "p", "label": "1"}] * 2
    scored = Scored(rollouts, rows, [1.0, 1.0], [1.0, 1.0], {})
    exp, metrics = make_experience(spec, _NoRoles(), scored, pad_id=0, kl_coef=0.0)
    assert exp.rewards.tolist() == pytest.approx([1.0, 0.5])
    assert metrics["group_reward_std"] == pytest.approx(math.sqrt(0.125))  # stdev([1, 0.5]) = sqrt(0.25 / 2)
