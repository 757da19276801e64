"""On-policy distillation's per-token reward and advantage (estimator ``opd``), on hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf.algo import compute_advantages_and_returns, reverse_kl_estimate, reverse_kl_rewards
from rlhf.algo.advantages import ADVANTAGE_ESTIMATORS

# One sample, four action positions, the last one padding (mask 0, garbage log-probs there).
STUDENT = torch.tensor([[-1.0, -2.0, -0.5, -7.0]])
TEACHER = torch.tensor([[-0.5, -4.0, -0.5, -1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
# r = teacher - student on the generated tokens: [0.5, -2.0, 0.0], 0 on padding
R = [0.5, -2.0, 0.0, 0.0]


def test_reward_is_teacher_minus_student_logprob_of_the_sampled_token() -> None:
    assert reverse_kl_rewards(STUDENT, TEACHER, MASK).tolist() == [R]


def test_reward_is_clamped_so_one_impossible_token_cannot_swamp_the_batch() -> None:
    r = reverse_kl_rewards(torch.tensor([[-1.0, -1.0]]), torch.tensor([[-15.0, 13.0]]), torch.ones(1, 2))
    assert r.tolist() == [[-10.0, 10.0]]
    unclamped = reverse_kl_rewards(torch.tensor([[-1.0]]), torch.tensor([[-15.0]]), torch.ones(1, 1), clamp=None)
    assert unclamped.tolist() == [[-14.0]]


def test_reward_carries_no_gradient_to_the_student() -> None:
    student = STUDENT.clone().requires_grad_()
    assert not reverse_kl_rewards(student, TEACHER, MASK).requires_grad


def test_reverse_kl_estimate_is_the_mean_student_minus_teacher_over_generated_tokens() -> None:
    # (-0.5 + 2.0 + 0.0) / 3; the padding position's -7 - (-1) is not counted
    assert float(reverse_kl_estimate(STUDENT, TEACHER, MASK)) == pytest.approx(0.5)


def test_opd_estimator_entry() -> None:
    e = ADVANTAGE_ESTIMATORS.get("opd")
    t = e.traits
    assert (t.teacher, t.needs_critic, t.is_group, e.whiten, e.baseline) == (True, False, False, True, None)


def opd(rewards: list[float], **kw) -> object:
    args = {"estimator": "opd", "gamma": 0.0, "teacher_rewards": reverse_kl_rewards(STUDENT, TEACHER, MASK)}
    return compute_advantages_and_returns(torch.tensor(rewards), MASK, **(args | kw))


def test_discount_zero_makes_each_tokens_return_its_own_reward() -> None:
    out = opd([0.0], no_std_norm=True)
    assert out.returns.tolist() == [R]
    assert out.rewards.tolist() == [R]


def test_advantage_is_the_reward_minus_its_mean_over_the_batchs_tokens() -> None:
    # Tinker's on-policy distillation baseline: mean of R over the 3 generated tokens is -0.5
    out = opd([0.0], no_std_norm=True)
    assert out.advantages.tolist() == [pytest.approx([1.0, -1.5, 0.5, 0.0])]


def test_full_whitening_also_divides_by_the_population_std() -> None:
    std = math.sqrt((1.0**2 + 1.5**2 + 0.5**2) / 3)
    out = opd([0.0])
    assert out.advantages.tolist() == [pytest.approx([1.0 / std, -1.5 / std, 0.5 / std, 0.0], abs=1e-6)]


def test_the_scalar_task_reward_does_not_train_opd() -> None:
    a, b = opd([0.0], no_std_norm=True), opd([5.0], no_std_norm=True)
    assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)


def test_discount_one_sums_the_future_rewards() -> None:
    out = opd([0.0], gamma=1.0, no_std_norm=True)
    assert out.returns.tolist() == [[-1.5, -2.0, 0.0, 0.0]]
    mean = -3.5 / 3
    assert out.advantages.tolist() == [pytest.approx([-1.5 - mean, -2.0 - mean, 0.0 - mean, 0.0])]


def test_a_reference_kl_in_the_reward_adds_to_the_teacher_reward() -> None:
    kl = torch.tensor([[0.2, 0.0, 0.0, 0.0]])
    out = opd([0.0], kl=kl, kl_coef=0.5, no_std_norm=True)
    assert out.rewards.tolist() == [pytest.approx([0.4, -2.0, 0.0, 0.0])]


def test_opd_without_teacher_rewards_is_refused() -> None:
    with pytest.raises(ValueError, match="teacher"):
        compute_advantages_and_returns(torch.zeros(1), MASK, estimator="opd")
