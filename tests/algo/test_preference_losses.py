"""Reward-model pairwise losses and DPO, cDPO, IPO, KTO, SimPO, ORPO on hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.algo.preference import (
    PREFERENCE_LOSSES,
    RM_LOSSES,
    PreferenceInputs,
    nll_regularizer,
    preference_accuracy,
)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _pair(pc: float, pr: float, rc: float, rr: float, **extra: torch.Tensor) -> PreferenceInputs:
    t = lambda v: torch.tensor([v])  # noqa: E731
    return PreferenceInputs(t(pc), t(pr), t(rc), t(rr), **extra)


LOGPS = st.floats(-50.0, 0.0, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(LOGPS, LOGPS), min_size=1, max_size=4), st.floats(0.01, 5.0), st.floats(0.0, 0.5))
def test_dpo_is_log_two_when_policy_equals_reference(pairs: list[tuple[float, float]], beta: float, eps: float) -> None:
    chosen, rejected = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    inputs = PreferenceInputs(chosen, rejected, chosen.clone(), rejected.clone())
    for name in ("dpo", "cdpo"):
        out = PREFERENCE_LOSSES.get(name)(inputs, beta=beta, label_smoothing=eps)
        assert out.loss.item() == pytest.approx(math.log(2))
        assert out.chosen_rewards.abs().max().item() == 0.0


def test_dpo_and_cdpo_by_hand() -> None:
    # z = (-1 + 3) - (-2 + 2) = 2, β z = 1.
    inputs = _pair(-1.0, -3.0, -2.0, -2.0)
    out = PREFERENCE_LOSSES.get("dpo")(inputs, beta=0.5)
    assert out.loss.item() == pytest.approx(softplus(-1.0))
    assert (out.chosen_rewards.item(), out.rejected_rewards.item()) == (0.5, -0.5)
    smoothed = PREFERENCE_LOSSES.get("cdpo")(inputs, beta=0.5, label_smoothing=0.1)
    assert smoothed.loss.item() == pytest.approx(0.9 * softplus(-1.0) + 0.1 * softplus(1.0))


def test_ipo_by_hand() -> None:
    inputs = _pair(-1.0, -3.0, -2.0, -2.0)  # z = 2
    assert PREFERENCE_LOSSES.get("ipo")(inputs, beta=0.5).loss.item() == pytest.approx((2 - 1) ** 2)
    assert PREFERENCE_LOSSES.get("ipo")(inputs, beta=0.25).loss.item() == pytest.approx(0.0)


def test_kto_by_hand() -> None:
    # KL = mean(π_KL - ref_KL) = 1; chosen log-ratio 3, rejected -1: both terms 1 - σ(2).
    inputs = PreferenceInputs(
        policy_chosen=torch.tensor([-1.0, -1.0]),
        policy_rejected=torch.tensor([-3.0]),
        reference_chosen=torch.tensor([-4.0, -4.0]),
        reference_rejected=torch.tensor([-2.0]),
        policy_kl=torch.tensor([0.0, 1.0]),
        reference_kl=torch.tensor([-1.0, 0.0]),
    )
    out = PREFERENCE_LOSSES.get("kto")(inputs, beta=1.0, desirable_weight=2.0, undesirable_weight=1.0)
    term = 1 - 1 / (1 + math.exp(-2.0))
    assert out.loss.item() == pytest.approx((2 * term + 2 * term + term) / 3)
    assert out.kl.item() == 1.0


def test_kto_kl_is_averaged_over_ranks_and_clamped_at_zero() -> None:
    base = dict(
        policy_chosen=torch.tensor([0.0]),
        policy_rejected=torch.tensor([0.0]),
        reference_chosen=torch.tensor([0.0]),
        reference_rejected=torch.tensor([0.0]),
    )
    local = PreferenceInputs(**base, policy_kl=torch.tensor([1.0]), reference_kl=torch.tensor([0.0]))
    out = PREFERENCE_LOSSES.get("kto")(local, beta=1.0, all_reduce=lambda t: t + 3.0, world_size=2)
    assert out.kl.item() == 2.0  # (1 + 3) / 2
    negative = PreferenceInputs(**base, policy_kl=torch.tensor([-5.0]), reference_kl=torch.tensor([0.0]))
    assert PREFERENCE_LOSSES.get("kto")(negative, beta=1.0).kl.item() == 0.0


def test_simpo_by_hand() -> None:
    # Average log-probs -4 / 2 = -2 and -9 / 3 = -3: -log σ(2 · 1 - 0.5).
    inputs = PreferenceInputs(
        torch.tensor([-4.0]),
        torch.tensor([-9.0]),
        chosen_lengths=torch.tensor([2.0]),
        rejected_lengths=torch.tensor([3.0]),
    )
    out = PREFERENCE_LOSSES.get("simpo")(inputs, beta=2.0, gamma=0.5)
    assert out.loss.item() == pytest.approx(softplus(-1.5))
    assert (out.chosen_rewards.item(), out.rejected_rewards.item()) == (-4.0, -6.0)


def test_orpo_by_hand() -> None:
    # p_c = 0.5 (odds 1), p_r = 0.25 (odds 1/3): log odds ratio ln 3, -log σ(ln 3) = ln(4/3); NLL = ln 2.
    inputs = PreferenceInputs(
        torch.tensor([2 * math.log(0.5)]),
        torch.tensor([math.log(0.25)]),
        chosen_lengths=torch.tensor([2.0]),
        rejected_lengths=torch.tensor([1.0]),
    )
    out = PREFERENCE_LOSSES.get("orpo")(inputs, lambd=0.1)
    assert out.loss.item() == pytest.approx(math.log(2) + 0.1 * math.log(4 / 3), rel=1e-6)


@pytest.mark.parametrize(
    ("name", "kwargs", "missing"),
    [
        ("dpo", {"beta": 0.1}, "reference_chosen"),
        ("simpo", {"beta": 2.0, "gamma": 0.5}, "chosen_lengths"),
        ("kto", {"beta": 0.1}, "policy_kl"),
    ],
)
def test_missing_inputs_are_named(name: str, kwargs: dict[str, float], missing: str) -> None:
    with pytest.raises(ValueError, match=missing):
        PREFERENCE_LOSSES.get(name)(PreferenceInputs(torch.zeros(1), torch.zeros(1)), **kwargs)


def test_rm_sigmoid_loss_with_and_without_margin() -> None:
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0])
    sigmoid = RM_LOSSES.get("sigmoid")
    assert sigmoid(chosen, rejected).item() == pytest.approx((softplus(-1.0) + math.log(2)) / 2)
    margin = torch.tensor([0.5, 1.0])
    assert sigmoid(chosen, rejected, margin).item() == pytest.approx((softplus(-0.5) + softplus(1.0)) / 2)


def test_rm_logexp_loss_is_stable_and_refuses_a_margin() -> None:
    logexp = RM_LOSSES.get("logexp")
    assert logexp(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1000.0])).item() == pytest.approx(
        (softplus(-1.0) + 1000.0) / 2
    )
    with pytest.raises(ValueError, match="margin"):
        logexp(torch.zeros(1), torch.zeros(1), torch.ones(1))


def test_accuracy_counts_strict_wins() -> None:
    assert preference_accuracy(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 2.0, 4.0])).item() == pytest.approx(
        1 / 3
    )


def test_nll_regularizer_is_mean_per_token_nll_of_chosen() -> None:
    assert nll_regularizer(torch.tensor([-2.0, -6.0]), torch.tensor([2.0, 3.0])).item() == pytest.approx(1.5)
