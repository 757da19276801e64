"""KL estimators, the clamp, KL folded into the reward, KL as a loss term, and the KL controllers."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo.kl import (
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
