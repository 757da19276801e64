"""The conventions a recipe can choose where veRL and OpenRLHF differ, on hand-computed tensors: the KL folded into the
score before a group baseline (algorithm.kl.before_baseline), unclipped scores (reward.clip_range null), the KL-loss
and entropy terms and the critic aggregated like the policy loss (algorithm.policy_loss.terms_aggregation,
critic.aggregation), and Dr. GRPO's divisor from each micro-batch's longest response
(algorithm.policy_loss.aggregation_norm_from). OpenRLHF's choice stays each key's default."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import (
    LossNormalizer,
    aggregate,
    compute_advantages_and_returns,
    compute_approx_kl,
    controller_kl,
    kl_loss,
    masked_whiten,
    value_loss,
)
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


# -- issue 35 items 2, 6, 9, 10 ---------------------------------------------------------------------------------------


def test_the_new_keys_default_to_openrlhfs():
    from rlhf.spec.schema import AdvantageSpec

    assert AdvantageSpec().std_eps == 1e-9 and AdvantageSpec().whiten_variance == "population"
    assert KLSpec().controller_kl == "token_mean"
    assert KLSpec().clamp_k3_only is False and KLSpec().straight_through is False


def test_k1_is_clamped_unless_k3_alone_is():
    log_ratio = torch.tensor([[12.0, -15.0, 3.0]])
    zeros = torch.zeros_like(log_ratio)
    assert compute_approx_kl(log_ratio, zeros, "k1").tolist() == [[10.0, -10.0, 3.0]]
    assert compute_approx_kl(log_ratio, zeros, "k1", clamp_k3_only=True).tolist() == [[12.0, -15.0, 3.0]]
    # k3 at log r = 12: e^-12 - 1 + 12 > 10, clamped either way
    assert compute_approx_kl(log_ratio, zeros, "k3", clamp_k3_only=True)[0, 0].item() == 10.0


def test_straight_through_keeps_k1s_value_with_k2s_gradient_and_no_weight():
    lp = torch.tensor([[0.5, -0.2]], requires_grad=True)
    ref = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    loss = kl_loss(lp, ref, mask, 1.0, "k1", old_log_probs=lp.detach() - 1.0, straight_through=True)
    assert math.isclose(float(loss), (0.5 - 0.2) / 2, rel_tol=1e-6)
    loss.backward()
    # gradient of mean(δ² / 2) is δ / 2 per token; the weight exp(1) of unbiased_gradient is not applied
    torch.testing.assert_close(lp.grad, torch.tensor([[0.25, -0.1]]))


def test_unbiased_whitening_divides_by_the_n_minus_one_variance():
    # returns 1, 2, 3 on three tokens: mean 2, population variance 2/3, unbiased 1
    x = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3)
    torch.testing.assert_close(masked_whiten(x, mask, unbiased=True), torch.tensor([[-1.0, 0.0, 1.0]]))
    s = math.sqrt(2 / 3)
    torch.testing.assert_close(masked_whiten(x, mask), torch.tensor([[-1 / s, 0.0, 1 / s]]))


def test_the_controller_reads_the_token_mean_or_the_mean_of_sequence_means():
    # sequence 1: KL 1 on 1 token; sequence 2: KL 0 on 3 tokens
    kl = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert math.isclose(controller_kl(kl, mask), 1 / 4)
    assert math.isclose(controller_kl(kl, mask, "seq_mean"), (1.0 + 0.0) / 2, rel_tol=1e-6)


def test_returns_step_over_a_masked_span_when_asked():
    # reward 1 at the last token, the middle one masked (a tool's output), gamma 0.5
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    from rlhf.algo.advantages import cumulative_returns, gae_advantages_and_returns

    assert cumulative_returns(rewards, mask, 0.5).tolist() == [[0.25, 0.5, 1.0]]
    assert cumulative_returns(rewards, mask, 0.5, skip_masked=True).tolist() == [[0.5, 0.0, 1.0]]
    # GAE with values 0.2 on the generated tokens, lambda 1: the first token's next value is the third's
    values = torch.tensor([[0.2, 0.7, 0.2]])
    adv, _ = gae_advantages_and_returns(values, rewards, mask, 0.5, 1.0, skip_masked=True)
    # A_2 = 1 - 0.2 = 0.8; A_0 = (0 + 0.5 * 0.2 - 0.2) + 0.5 * 0.8 = 0.3
    torch.testing.assert_close(adv[:, [0, 2]], torch.tensor([[0.3, 0.8]]))
