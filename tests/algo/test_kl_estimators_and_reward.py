"""KL estimators, the clamp, KL folded into the reward, KL as a loss term, and the KL controllers."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo.kl import (
    KL_IS_WEIGHT_CLIP,
    AdaptiveKLController,
    FixedKLController,
    compute_approx_kl,
    compute_reward,
    kl_loss,
    make_kl_controller,
)

DELTAS = [0.0, 1.0, -1.0, 2.0]


def _kl(estimator: str, deltas: list[float]) -> list[float]:
    log_probs = torch.tensor(deltas) - 3.0  # only the difference to the reference matters
    return compute_approx_kl(log_probs, torch.full((len(deltas),), -3.0), estimator).tolist()


def test_k1_is_the_log_ratio() -> None:
    assert _kl("k1", DELTAS) == pytest.approx(DELTAS)


def test_k2_is_half_the_squared_log_ratio() -> None:
    assert _kl("k2", DELTAS) == pytest.approx([0.0, 0.5, 0.5, 2.0])


def test_k3_is_exp_minus_delta_minus_one_plus_delta() -> None:
    expected = [0.0, math.exp(-1) - 1 + 1, math.exp(1) - 1 - 1, math.exp(-2) - 1 + 2]
    assert _kl("k3", DELTAS) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("estimator", "delta", "clamped"),
    [("k1", 30.0, 10.0), ("k1", -30.0, -10.0), ("k2", 5.0, 10.0), ("k3", -15.0, 10.0)],
)
def test_estimates_are_clamped_to_plus_minus_ten(estimator: str, delta: float, clamped: float) -> None:
    assert _kl(estimator, [delta]) == [clamped]


def test_kl_is_computed_in_fp32() -> None:
    kl = compute_approx_kl(torch.tensor([0.5], dtype=torch.bfloat16), torch.tensor([0.0], dtype=torch.bfloat16))
    assert kl.dtype == torch.float32


def test_compute_reward_places_clipped_reward_at_last_action_token_and_masks_kl() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    kl = torch.full((2, 4), 0.5)
    rewards = compute_reward(torch.tensor([2.0, 20.0]), 0.1, kl, mask, (-10.0, 10.0))
    # -0.1 * 0.5 = -0.05 per action token; 20 is clipped to 10.
    assert rewards[0].tolist() == pytest.approx([0.0, -0.05, 1.95, 0.0])
    assert rewards[1].tolist() == pytest.approx([-0.05, -0.05, -0.05, 9.95])


def test_compute_reward_uses_last_action_token_with_environment_holes() -> None:
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0]])
    rewards = compute_reward(torch.tensor([3.0]), 0.0, None, mask, None)
    assert rewards.tolist() == [[0.0, 0.0, 3.0, 0.0, 0.0]]


def test_compute_reward_negative_coef_counts_as_zero_and_clip_can_be_off() -> None:
    mask = torch.ones(1, 2)
    rewards = compute_reward(torch.tensor([50.0]), -1.0, torch.ones(1, 2), mask, None)
    assert rewards.tolist() == [[0.0, 50.0]]


def test_kl_loss_is_coef_times_token_mean_of_the_estimate() -> None:
    log_probs = torch.tensor([[1.0, 0.0, 9.0]])
    ref = torch.tensor([[0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # k3 of deltas [1, 0] = [e^-1 - 1 + 1, 0]; token mean over 2 tokens.
    assert kl_loss(log_probs, ref, mask, 0.5, "k3").item() == pytest.approx(0.5 * math.exp(-1) / 2)


def test_k3_gradient_stays_finite_far_below_the_clamp() -> None:
    # δ = -100: exp(100) overflows fp32 to inf, and the clamp's zero derivative times inf would be NaN (OpenRLHF
    # 0.11.2 bounds δ at -10 inside k3 for this). The value is the clamp's 10 and the gradient 0.
    log_probs = torch.tensor([-100.0, -0.5], requires_grad=True)
    kl = compute_approx_kl(log_probs, torch.zeros(2), "k3")
    kl.sum().backward()
    assert kl[0].item() == 10.0
    assert log_probs.grad.tolist() == pytest.approx([0.0, 1 - math.exp(0.5)])


def _kl_grad(estimator: str, log_probs: torch.Tensor, ref: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    lp = log_probs.clone().requires_grad_()
    kl = compute_approx_kl(lp, ref, estimator, **kwargs)
    kl.sum().backward()
    return kl.detach(), lp.grad


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_unbiased_gradient_keeps_the_value_and_gives_w_delta_as_the_gradient(estimator: str) -> None:
    # δ = log π - log π_ref = [0.5, -1, 3]; w = π / π_old = exp([0.2, -0.3, 4]) clamped at 10 (e^4 = 54.6 -> 10).
    log_probs = torch.tensor([0.5, -1.0, 3.0]) - 2.0
    ref = torch.full((3,), -2.0)
    old = log_probs - torch.tensor([0.2, -0.3, 4.0])
    value, grad = _kl_grad(estimator, log_probs, ref, old_log_probs=old, unbiased_gradient=True)
    plain, _ = _kl_grad(estimator, log_probs, ref)
    torch.testing.assert_close(value, plain)  # the forward value is the estimator's
    w = torch.tensor([math.exp(0.2), math.exp(-0.3), KL_IS_WEIGHT_CLIP])
    torch.testing.assert_close(grad, w * torch.tensor([0.5, -1.0, 3.0]))


def test_unbiased_gradient_without_old_log_probs_is_the_on_policy_one() -> None:
    # w = 1: k1's gradient becomes δ (instead of 1), the same as k2's pathwise one.
    log_probs, ref = torch.tensor([0.5, -1.0]), torch.zeros(2)
    _, grad = _kl_grad("k1", log_probs, ref, unbiased_gradient=True)
    _, k2_grad = _kl_grad("k2", log_probs, ref)
    torch.testing.assert_close(grad, torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(grad, k2_grad)


def test_kl_loss_passes_the_unbiased_gradient_through() -> None:
    log_probs = torch.tensor([[0.5, -1.0]], requires_grad=True)
    loss = kl_loss(log_probs, torch.zeros(1, 2), torch.ones(1, 2), 0.1, "k1", unbiased_gradient=True)
    loss.backward()
    assert loss.item() == pytest.approx(0.1 * (0.5 - 1.0) / 2)
    assert log_probs.grad.tolist()[0] == pytest.approx([0.1 * 0.5 / 2, 0.1 * -1.0 / 2])


def test_fixed_controller_never_moves() -> None:
    controller = FixedKLController(0.05)
    controller.update(current=100.0, n_steps=1000)
    assert controller.value == 0.05


@pytest.mark.parametrize(("current", "expected"), [(9.0, 0.1 * 1.002), (3.0, 0.1 * 0.998), (6.6, 0.1 * 1.001)])
def test_adaptive_controller_follows_ziegler(current: float, expected: float) -> None:
    # target 6, horizon 10000, 100 samples: error clip(current / 6 - 1, -0.2, 0.2) * 100 / 10000.
    controller = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    controller.update(current, n_steps=100)
    assert controller.value == pytest.approx(expected)


def test_make_kl_controller_picks_fixed_without_target() -> None:
    assert isinstance(make_kl_controller(0.01), FixedKLController)
    assert isinstance(make_kl_controller(0.01, target=6.0), AdaptiveKLController)
