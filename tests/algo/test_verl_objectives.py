"""The objectives taken from veRL, on hand-computed tensors: the CISPO and GPG policy losses, the GPG estimator,
token_sum aggregation and the abs KL estimator."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import (
    LossNormalizer,
    PolicyLossParams,
    aggregate,
    compute_advantages_and_returns,
    compute_approx_kl,
    policy_loss,
)


def _grad_of(loss_type: str, log_probs: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, **kw):
    lp = log_probs.clone().requires_grad_()
    out = policy_loss(lp, old, adv, torch.ones_like(lp), loss_type=loss_type, **kw)
    out.loss.backward()
    return out, lp.grad


def test_cispo_keeps_the_gradient_of_a_clipped_token_weighted_by_the_clipped_ratio():
    # Ratios e^0.5 = 1.65 (clipped to 1.2) and 1 (inside), advantages 1 and -2, token mean over 2.
    old = torch.tensor([[-1.0, -2.0]])
    log_probs = torch.tensor([[-0.5, -2.0]])
    adv = torch.tensor([[1.0, -2.0]])
    out, grad = _grad_of("cispo", log_probs, old, adv, clip_eps_low=10.0, clip_eps_high=0.2)
    # L = -(1.2 * 1 * -0.5 + 1 * -2 * -2) / 2 = -(-0.6 + 4) / 2
    assert math.isclose(float(out.loss), -1.7, rel_tol=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-1.2 / 2, 2.0 / 2]]))
    assert math.isclose(float(out.clip_ratio), 0.5)
    # PPO would give the clipped token no gradient at all.
    _, ppo_grad = _grad_of("ppo", log_probs, old, adv, clip_eps_low=0.2, clip_eps_high=0.2)
    assert float(ppo_grad[0, 0]) == 0.0


def test_gpg_is_plain_policy_gradient():
    log_probs = torch.tensor([[-0.5, -2.0]])
    adv = torch.tensor([[1.0, -2.0]])
    out, grad = _grad_of("gpg", log_probs, log_probs - 3.0, adv)
    assert math.isclose(float(out.loss), -(-0.5 + 4.0) / 2, rel_tol=1e-6)
    torch.testing.assert_close(grad, -adv / 2)


@pytest.mark.parametrize("loss_type", ["cispo", "gpg"])
def test_no_dual_clip_for_losses_without_a_surrogate(loss_type):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="no dual clip"):
        policy_loss(x, x, x, torch.ones(1, 2), loss_type=loss_type, dual_clip=3.0)


def test_gpg_advantage_scales_by_batch_size_over_non_zero_rewards():
    # Two groups of two; one non-zero reward in four: alpha = 4. Group means 0.5 and 0.
    out = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.ones(4, 1), estimator="gpg", n_samples_per_prompt=2
    )
    torch.testing.assert_close(out.advantages, torch.tensor([[2.0], [-2.0], [0.0], [0.0]]))


def test_token_sum_undoes_the_engines_mean_over_ranks_and_micro_batches():
    loss = torch.tensor([[1.0, 2.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(aggregate(loss, mask, "token_sum")) == 3.0
    assert float(aggregate(loss, mask, "token_sum", LossNormalizer(dp_size=2, grad_accum_steps=3))) == 18.0


def test_abs_kl_is_the_absolute_log_ratio():
    kl = compute_approx_kl(torch.tensor([0.0, -1.0, 0.0]), torch.tensor([0.5, 0.0, 20.0]), "abs")
    torch.testing.assert_close(kl, torch.tensor([0.5, 1.0, 10.0]))  # clamped at 10 like every estimator here


# -- opo, grpo_passk, sapo, geo_mean, kl_cov, clip_cov (issue 35) -----------------------------------------------------


def test_opo_subtracts_the_length_weighted_group_mean():
    # rewards 1, 0, 0, 1 with response lengths 1, 3, 2, 2: baseline (1 + 2) / 8 = 3/8
    mask = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.float32)
    out = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0, 0.0, 1.0]), mask, estimator="opo", n_samples_per_prompt=4
    ).advantages
    torch.testing.assert_close(out[:, 0], torch.tensor([5 / 8, -3 / 8, -3 / 8, 5 / 8]))
    torch.testing.assert_close(out, out[:, :1] * mask)


def test_grpo_passk_pushes_only_the_best_sample_by_its_lead_over_the_second():
    rewards = torch.tensor([1.0, 3.0, 2.0, 0.5])
    # unbiased std: deviations from 1.625 are -0.625, 1.375, 0.375, -1.125; squares sum 3.6875; / 3
    std = math.sqrt(3.6875 / 3)
    out = compute_advantages_and_returns(
        rewards, torch.ones(4, 2), estimator="grpo_passk", n_samples_per_prompt=4, std_eps=1e-6
    ).advantages
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 1.0 / (std + 1e-6), 0.0, 0.0]))


def test_sapo_gate_at_ratio_one_is_two_over_tau_with_ppos_gradient():
    # f(1) = sigmoid(0) * 4 / tau = 2 / tau; d f / d log pi at ratio 1 = sigmoid'(0) * 4 = 1, whatever tau.
    log_probs = torch.tensor([[-1.0, -2.0]])
    adv = torch.tensor([[1.0, -2.0]])
    out, grad = _grad_of(
        "sapo", log_probs, log_probs.clone(), adv, aggregation="seq_mean", params=PolicyLossParams(sapo_tau_neg=2.0)
    )
    # seq_mean of one sequence: (-2/1 * 1 + -2/2 * -2) / 2 = 0
    assert math.isclose(float(out.loss), (-2.0 + 2.0) / 2, abs_tol=1e-6)
    torch.testing.assert_close(grad, -adv / 2)


def test_geo_mean_clips_each_log_ratio_on_the_advantages_side():
    old = torch.zeros(2, 2)
    log_ratio = torch.tensor([[0.1, -0.3], [0.1, -0.3]])
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    out, _ = _grad_of("geo_mean", log_ratio, old, adv, aggregation="seq_mean")
    # A > 0: min(l, clip(l)) = [0.1, -0.3] -> -exp(-0.1); A < 0: max(l, clip(l)) = [0.1, -0.2] -> +exp(-0.05)
    expected = (-math.exp(-0.1) + math.exp(-0.05)) / 2
    assert math.isclose(float(out.loss), expected, rel_tol=1e-5)


def test_kl_cov_adds_the_abs_log_ratio_on_the_largest_covariance_token():
    # A = [1, 0, -1], log pi = [-1, -1, -4]: covariances (A - 0)(log pi + 2) = 1, 0, 2 -> the third token
    log_probs = torch.tensor([[-1.0, -1.0, -4.0]])
    old = log_probs - torch.tensor([[0.1, 0.0, 0.2]])
    adv = torch.tensor([[1.0, 0.0, -1.0]])
    out, _ = _grad_of("kl_cov", log_probs, old, adv, params=PolicyLossParams(cov_fraction=0.34, kl_cov_coef=0.5))
    tokens = [-math.exp(0.1), 0.0, math.exp(0.2) + 0.5 * 0.2]
    assert math.isclose(float(out.loss), sum(tokens) / 3, rel_tol=1e-5)


def test_clip_cov_drops_the_token_in_the_covariance_band():
    # covariances as above: 1 (not strictly inside (1, 5)), 0, 2 (inside, and unclipped): the third token is dropped
    log_probs = torch.tensor([[-1.0, -1.0, -4.0]])
    old = log_probs.clone()
    adv = torch.tensor([[1.0, 0.0, -1.0]])
    out, grad = _grad_of("clip_cov", log_probs, old, adv, params=PolicyLossParams(cov_fraction=0.34))
    assert math.isclose(float(out.loss), -1.0 / 3, rel_tol=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-1.0 / 3, 0.0, 0.0]]))


def test_remax_subtracts_the_greedy_responses_reward_from_every_token():
    # rewards 1 and 0, the greedy response to their prompt scored 0.25; k1 KL 0.1 per token, coef 1
    mask = torch.ones(2, 2)
    out = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0]),
        mask,
        estimator="remax",
        kl=torch.full((2, 2), 0.1),
        kl_coef=1.0,
        n_samples_per_prompt=2,
        greedy_rewards=torch.tensor([0.25, 0.25]),
    ).advantages
    torch.testing.assert_close(out, torch.tensor([[0.75 - 0.2, 0.75 - 0.1], [-0.25 - 0.2, -0.25 - 0.1]]))
    with pytest.raises(ValueError, match="greedy"):
        compute_advantages_and_returns(torch.tensor([1.0]), torch.ones(1, 2), estimator="remax")
