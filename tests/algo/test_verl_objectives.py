"""The objectives taken from veRL, on hand-computed tensors: the CISPO and GPG policy losses, the GPG estimator,
token_sum aggregation and the abs KL estimator."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import LossNormalizer, aggregate, compute_advantages_and_returns, compute_approx_kl, policy_loss


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
