"""The conventions a recipe can choose where veRL and OpenRLHF differ, on hand-computed tensors: the KL folded into the
score before a group baseline (algorithm.kl.before_baseline), unclipped scores (reward.clip_range null), the KL-loss
and entropy terms and the critic aggregated like the policy loss (algorithm.policy_loss.terms_aggregation,
critic.aggregation), and Dr. GRPO's divisor from each micro-batch's longest response
(algorithm.policy_loss.aggregation_norm_from). OpenRLHF's choice stays each key's default."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import LossNormalizer, aggregate, compute_advantages_and_returns, value_loss
from rlhf.algo.aggregation import response_width
from rlhf.pipelines.rl_losses import TERM_AGGREGATION, width_normalizer
from rlhf.spec.schema import CriticSpec, KLSpec, PolicyLossSpec, RewardSpec


def test_the_defaults_are_openrlhfs():
    assert KLSpec().before_baseline is False
    assert PolicyLossSpec().terms_aggregation == TERM_AGGREGATION == "token_mean"
    assert PolicyLossSpec().aggregation_norm_from == "max_new_tokens"
    assert CriticSpec().aggregation == "token_mean"
    assert RewardSpec().clip_range == [-10.0, 10.0]


def test_kl_before_the_group_baseline_gives_one_advantage_per_sequence():
    # Two samples of one prompt, scores 1 and 0; summed KL 2 and 0 at coef 0.5: adjusted scores 0 and 0 -> a tie.
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    kl = torch.tensor([[1.5, 0.5, 9.0], [0.0, 0.0, 0.0]])  # 9.0 is padding: it must not count
    out = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0]),
        mask,
        estimator="dr_grpo",
        kl=kl,
        kl_coef=0.5,
        n_samples_per_prompt=2,
        kl_before_baseline=True,
    )
    torch.testing.assert_close(out.advantages, torch.zeros(2, 3))
    # Scores 3 and 0, same KL: adjusted 2 and 0, mean 1 -> +1 and -1 on every response token.
    out = compute_advantages_and_returns(
        torch.tensor([3.0, 0.0]),
        mask,
        estimator="dr_grpo",
        kl=kl,
        kl_coef=0.5,
        n_samples_per_prompt=2,
        kl_before_baseline=True,
    )
    torch.testing.assert_close(out.advantages, torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]]))


def test_kl_before_baseline_leaves_estimators_without_a_baseline_alone():
    mask = torch.ones(1, 2)
    kl = torch.tensor([[0.2, 0.4]])
    common = {"estimator": "reinforce", "kl": kl, "kl_coef": 1.0, "reward_clip_range": None}
    a = compute_advantages_and_returns(torch.tensor([1.0]), mask, **common).returns
    b = compute_advantages_and_returns(torch.tensor([1.0]), mask, kl_before_baseline=True, **common).returns
    # G_0 = 1 - 0.2 - 0.4, G_1 = 1 - 0.4 both ways.
    torch.testing.assert_close(a, torch.tensor([[0.4, 0.6]]))
    torch.testing.assert_close(b, a)


def test_null_clip_range_keeps_scores_past_ten():
    mask = torch.ones(2, 1)
    clipped = compute_advantages_and_returns(torch.tensor([30.0, -20.0]), mask, estimator="reinforce")
    kept = compute_advantages_and_returns(
        torch.tensor([30.0, -20.0]), mask, estimator="reinforce", reward_clip_range=None
    )
    torch.testing.assert_close(clipped.returns, torch.tensor([[10.0], [-10.0]]))
    torch.testing.assert_close(kept.returns, torch.tensor([[30.0], [-20.0]]))


@pytest.mark.parametrize(
    ("mask", "width"),
    [
        ([[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]], 3),  # prompt columns on the left are not counted
        ([[1, 0, 1, 0, 0], [0, 1, 0, 0, 0]], 3),  # an environment token inside a response is
        ([[0, 0, 0], [0, 0, 0]], 1),  # nothing to learn from: 1, never 0
    ],
)
def test_response_width_is_the_longest_span_of_loss_tokens(mask, width):
    assert response_width(torch.tensor(mask, dtype=torch.float32)) == width


def test_dr_grpo_divisor_from_the_micro_batch_width():
    # Token sums 3 and 1 over 2 sequences, divided by the longest response (3), not by max_new_tokens.
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    loss = torch.tensor([[5.0, 1.0, 1.0, 1.0], [5.0, 1.0, 7.0, 7.0]])
    norm = width_normalizer(None, mask)
    assert norm.constant == 3.0
    torch.testing.assert_close(aggregate(loss, mask, "seq_mean_token_sum_norm", norm), torch.tensor(4.0 / 2 / 3))
    # A step window's counts survive; only the constant is replaced.
    kept = width_normalizer(LossNormalizer(global_batch_size=4.0, dp_size=2, constant=100.0), mask)
    assert (kept.global_batch_size, kept.dp_size, kept.constant) == (4.0, 2, 3.0)


def test_critic_aggregation_seq_mean_weighs_every_sequence_alike():
    # Unclipped squared errors 4 (one token) and 0, 0, 0 (three tokens): token mean 1, sequence mean 2.
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    values = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    returns = torch.zeros(2, 3)
    token = value_loss(values, values, returns, mask, clip_eps=None)
    seq = value_loss(values, values, returns, mask, clip_eps=None, aggregation="seq_mean")
    assert math.isclose(float(token), 0.5 * 1.0)
    assert math.isclose(float(seq), 0.5 * 2.0, rel_tol=1e-6)
