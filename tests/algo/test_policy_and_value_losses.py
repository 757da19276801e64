"""PPO clip (clip-higher, dual clip), GSPO, IS corrections in the loss, aggregation names, metrics, value loss and
entropy bonus, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from algo_helpers import garble, random_mask, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.algo.is_correction import ISCorrection
from rlhf.algo.policy_loss import PolicyLossParams, entropy_bonus, policy_loss, value_loss

TIS = ISCorrection("token", "clip", "ratio")
ICEPOP = ISCorrection("token", "mask", "ratio")
SEQ_MASK_TIS = ISCorrection("seq", "mask", "ratio")
CORRECTIONS = {"tis": TIS, "icepop": ICEPOP, "seq_mask_tis": SEQ_MASK_TIS}


def _log(values: list[float]) -> torch.Tensor:
    return torch.tensor([values]).log()


def test_ppo_loss_is_minus_advantage_times_ratio_where_no_clip_is_active() -> None:
    old = torch.zeros(1, 2)
    log_probs = _log([1.1, 0.9]).requires_grad_()
    advantages = torch.tensor([[1.0, -2.0]])
    out = policy_loss(log_probs, old, advantages, torch.ones(1, 2))
    assert out.loss.item() == pytest.approx((-1.0 * 1.1 + 2.0 * 0.9) / 2)
    assert out.clip_ratio.item() == 0.0
    out.loss.backward()
    # d(-A ρ)/d log π = -A ρ, token-meaned over 2 tokens.
    assert log_probs.grad.tolist()[0] == pytest.approx([-1.1 / 2, 2.0 * 0.9 / 2])


def test_ppo_gradient_vanishes_where_the_clip_is_active() -> None:
    # ratio 1.5 with A > 0 and ratio 0.5 with A < 0 are clipped; ratio 1.1 with A > 0 is not.
    log_probs = _log([1.5, 0.5, 1.1]).requires_grad_()
    advantages = torch.tensor([[1.0, -1.0, 1.0]])
    out = policy_loss(log_probs, torch.zeros(1, 3), advantages, torch.ones(1, 3))
    assert out.loss.item() == pytest.approx((-1.2 + 0.8 - 1.1) / 3)
    assert out.clip_ratio.item() == pytest.approx(2 / 3)
    out.loss.backward()
    assert log_probs.grad.tolist()[0] == pytest.approx([0.0, 0.0, -1.1 / 3])


def test_clip_higher_uses_separate_low_and_high_epsilon() -> None:
    log_probs, advantages = _log([1.25, 0.75]), torch.tensor([[1.0, -1.0]])
    symmetric = policy_loss(log_probs, torch.zeros(1, 2), advantages, torch.ones(1, 2))
    higher = policy_loss(log_probs, torch.zeros(1, 2), advantages, torch.ones(1, 2), clip_eps_high=0.28)
    # 1.25 is clipped to 1.2 only with ε_high = 0.2; 0.75 is clipped to 0.8 in both (ε_low = 0.2).
    assert symmetric.loss.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert higher.loss.item() == pytest.approx((-1.25 + 0.8) / 2)


def test_dual_clip_bounds_negative_advantage_loss() -> None:
    # ratio 5, A = -1: min(-5, -1.2) = -5, bounded below by c·A = -3 -> loss 3. The A > 0 token is untouched.
    log_probs, advantages = _log([5.0, 5.0]), torch.tensor([[-1.0, 1.0]])
    plain = policy_loss(log_probs, torch.zeros(1, 2), advantages, torch.ones(1, 2))
    dual = policy_loss(log_probs, torch.zeros(1, 2), advantages, torch.ones(1, 2), dual_clip=3.0)
    assert plain.loss.item() == pytest.approx((5.0 - 1.2) / 2)
    assert dual.loss.item() == pytest.approx((3.0 - 1.2) / 2)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(log_probs, torch.zeros(1, 2), advantages, torch.ones(1, 2), dual_clip=1.0)


def test_ppo_log_ratio_is_clamped_at_twenty() -> None:
    out = policy_loss(torch.tensor([[30.0]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert out.loss.item() == pytest.approx(math.exp(20), rel=1e-5)


def test_metrics_ppo_kl_and_rollout_kl() -> None:
    log_probs = torch.tensor([[-1.0, -2.0, 7.0]])
    old = torch.tensor([[-1.5, -1.0, 0.0]])
    rollout = torch.tensor([[-1.0, -1.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = policy_loss(log_probs, old, torch.ones(1, 3), mask, rollout_log_probs=rollout)
    assert out.ppo_kl.item() == pytest.approx((-0.5 + 1.0) / 2)  # mean(old - new)
    assert out.rollout_kl.item() == pytest.approx((0.5 + 0.0) / 2)  # mean(rollout - old)
    assert policy_loss(log_probs, old, torch.ones(1, 3), mask).rollout_kl is None


def test_gspo_uses_the_sequence_geometric_mean_ratio_and_sequence_mean() -> None:
    old = torch.zeros(2, 3)
    log_probs = torch.tensor([[0.1, 0.3, 9.0], [0.0, 0.0, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3])
    out = policy_loss(log_probs, old, advantages, mask, loss_type="gspo", clip_eps_low=0.5, clip_eps_high=0.5)
    # s_0 = exp(0.4 / 2), s_1 = exp(0.3 / 3); each sequence's token mean is -A s; aggregation forced to seq_mean.
    assert out.loss.item() == pytest.approx((-math.exp(0.2) + math.exp(0.1)) / 2, rel=1e-6)


def test_gspo_with_is_correction_measures_against_rollout_without_token_weights() -> None:
    log_probs = torch.tensor([[0.1, 0.3]])
    rollout = torch.zeros(1, 2)
    old = torch.tensor([[3.0, -3.0]])  # far from rollout: token IS weights would be e^±3
    kwargs = dict(loss_type="gspo", clip_eps_low=0.5, clip_eps_high=0.5)
    corrected = policy_loss(
        log_probs, old, torch.ones(1, 2), torch.ones(1, 2), rollout_log_probs=rollout, is_correction=TIS, **kwargs
    )
    assert corrected.loss.item() == pytest.approx(-math.exp(0.2), rel=1e-6)
    assert corrected.is_filter_ratio is None  # no gate was applied


def test_gspo_with_the_configured_aggregation_takes_one_token_mean() -> None:
    # The sequences of the sequence-mean test: token losses -s_0 (2 tokens) and +s_1 (3 tokens), token_mean over 5.
    old = torch.zeros(2, 3)
    log_probs = torch.tensor([[0.1, 0.3, 9.0], [0.0, 0.0, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3])
    kwargs = dict(loss_type="gspo", clip_eps_low=0.5, clip_eps_high=0.5, aggregation="token_mean")
    out = policy_loss(
        log_probs, old, advantages, mask, params=PolicyLossParams(seq_ratio_aggregation="configured"), **kwargs
    )
    assert out.loss.item() == pytest.approx((-2 * math.exp(0.2) + 3 * math.exp(0.1)) / 5, rel=1e-6)
    default = policy_loss(log_probs, old, advantages, mask, **kwargs)  # seq_mean, whatever aggregation says
    assert default.loss.item() == pytest.approx((-math.exp(0.2) + math.exp(0.1)) / 2, rel=1e-6)


def test_gspo_token_gradient_reaches_each_token_through_its_own_log_prob() -> None:
    # One sequence of 2 tokens, s = exp(0.2), A = [1, 3] (unclipped), seq_mean: L = -(1 + 3) s / 2.
    old = torch.zeros(1, 2)
    advantages = torch.tensor([[1.0, 3.0]])
    mask = torch.ones(1, 2)
    grads = {}
    for form in ("sequence", "token"):
        log_probs = torch.tensor([[0.1, 0.3]], requires_grad=True)
        params = PolicyLossParams(seq_ratio_gradient=form)
        out = policy_loss(log_probs, old, advantages, mask, loss_type="gspo", clip_eps_high=0.5, params=params)
        assert out.loss.item() == pytest.approx(-2 * math.exp(0.2), rel=1e-6)  # the same value
        out.loss.backward()
        grads[form] = log_probs.grad
    s = math.exp(0.2)
    # GSPO: dL/dlog pi_t = -(A_0 + A_1)/2 · s/2 for both tokens; GSPO-token: -A_t · s / 2, token t's own.
    torch.testing.assert_close(grads["sequence"], torch.tensor([[-s, -s]]))
    torch.testing.assert_close(grads["token"], torch.tensor([[-s / 2, -3 * s / 2]]))


def test_gspo_with_token_weights_takes_its_ratio_against_old_and_weighs_each_token() -> None:
    log_probs = torch.tensor([[0.1, 0.3]])
    rollout = torch.zeros(1, 2)
    old = torch.tensor([[0.5, -0.5]])  # token IS weights e^0.5 (clamped to 1.5 by the band) and e^-0.5
    tis = ISCorrection("token", "clip", "ratio", 0.0, 1.5)
    params = PolicyLossParams(seq_ratio_is_correction="token_weights")
    out = policy_loss(
        log_probs,
        old,
        torch.ones(1, 2),
        torch.ones(1, 2),
        loss_type="gspo",
        clip_eps_low=0.5,
        clip_eps_high=0.5,
        rollout_log_probs=rollout,
        is_correction=tis,
        params=params,
    )
    # s = exp(((0.1 - 0.5) + (0.3 + 0.5)) / 2) = exp(0.2) against old; token losses -s·[1.5, e^-0.5], seq_mean.
    assert out.loss.item() == pytest.approx(-math.exp(0.2) * (1.5 + math.exp(-0.5)) / 2, rel=1e-6)
    assert out.is_filter_ratio.item() == pytest.approx(0.5)  # the first token's weight was clipped


def test_gspo_without_a_dual_clip_leaves_negative_advantages_unbounded() -> None:
    # s = e^1.5 > c = 2 with A = -1: the dual clip bounds the loss at c, without it the loss is s.
    log_probs, old, adv, mask = torch.full((1, 2), 1.5), torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1, 2)
    bounded = policy_loss(log_probs, old, adv, mask, loss_type="gspo", dual_clip=2.0)
    assert bounded.loss.item() == pytest.approx(2.0)
    assert policy_loss(log_probs, old, adv, mask, loss_type="gspo").loss.item() == pytest.approx(math.exp(1.5))


def test_seq_ratio_choices_are_checked() -> None:
    with pytest.raises(ValueError, match="seq_ratio_gradient"):
        PolicyLossParams(seq_ratio_gradient="tokens")


def test_tis_weights_multiply_the_token_loss() -> None:
    # ratio 1 and A = 1: token loss -1, weighted by clamp(w) = [0.5, 2.0].
    rollout = -_log([0.25, 2.0])  # log w = old - rollout = log [0.25, 2]
    out = policy_loss(
        torch.zeros(1, 2),
        torch.zeros(1, 2),
        torch.ones(1, 2),
        torch.ones(1, 2),
        rollout_log_probs=rollout,
        is_correction=TIS,
    )
    assert out.loss.item() == pytest.approx(-(0.5 + 2.0) / 2)
    assert out.is_filter_ratio.item() == pytest.approx(0.5)  # 0.25 clamped up to 0.5: one of two tokens


def test_is_correction_needs_rollout_log_probs_and_level_off_disables_it() -> None:
    args = (torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="rollout"):
        policy_loss(*args, is_correction=ICEPOP)
    off = policy_loss(*args, rollout_log_probs=torch.full((1, 2), 3.0), is_correction=ISCorrection())
    assert off.loss.item() == pytest.approx(-1.0) and off.is_filter_ratio is None


def test_openrlhf_loss_agg_mode_names_aggregate_as_ours() -> None:
    # Sequence 0: token losses -1, -1, -1; sequence 1: -4 on its one token. Token mean -7/4, sample mean -5/2.
    log_probs, old = torch.zeros(2, 3), torch.zeros(2, 3)
    advantages = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    for name, expected in (("token-mean", -7 / 4), ("seq-mean-token-mean", -5 / 2)):
        out = policy_loss(log_probs, old, advantages, mask, aggregation=name)
        assert out.loss.item() == pytest.approx(expected, rel=1e-6), name


@settings(max_examples=40, deadline=None)
@given(seeds, st.sampled_from(sorted(CORRECTIONS)))
def test_is_correction_with_weights_inside_the_bounds_is_plain_importance_weighting(seed: int, name: str) -> None:
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages = (torch.randn(3, 4, generator=g) * 0.1 for _ in range(3))
    mask = random_mask(g, 3, 4)
    w = torch.empty(3, 4).uniform_(0.6, 4.0, generator=g)  # every weight inside [0.5, 5.0]
    rollout = old - w.log()
    out = policy_loss(log_probs, old, advantages, mask, rollout_log_probs=rollout, is_correction=CORRECTIONS[name])
    # Same per-token loss, weighted by w and token-meaned: no truncation or masking happened.
    ratio = (log_probs - old).exp()
    token_loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    torch.testing.assert_close(out.loss, (w * token_loss * mask).sum() / mask.sum())
    # With the rollout equal to the trainer (w = 1) the correction changes nothing at all.
    same = policy_loss(log_probs, old, advantages, mask, rollout_log_probs=old, is_correction=CORRECTIONS[name])
    torch.testing.assert_close(same.loss, policy_loss(log_probs, old, advantages, mask).loss)


@settings(max_examples=40, deadline=None)
@given(
    seeds,
    st.sampled_from(["ppo", "gspo"]),
    st.sampled_from([TIS, ICEPOP, SEQ_MASK_TIS, ISCorrection("seq", "mask", "binary_kl", 0.0, 0.05), None]),
)
def test_masked_positions_never_change_the_policy_loss(seed: int, loss_type: str, correction) -> None:
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages = (torch.randn(3, 5, generator=g) * 0.3 for _ in range(3))
    rollout = old + torch.randn(3, 5, generator=g) * 0.3
    mask = random_mask(g, 3, 5)
    kwargs = dict(loss_type=loss_type, dual_clip=3.0, is_correction=correction, rollout_log_probs=rollout)
    clean = policy_loss(log_probs, old, advantages, mask, **kwargs)
    kwargs["rollout_log_probs"] = garble(rollout, mask, g)
    dirty = policy_loss(garble(log_probs, mask, g), garble(old, mask, g), garble(advantages, mask, g), mask, **kwargs)
    for field in ("loss", "clip_ratio", "ppo_kl", "rollout_kl", "is_filter_ratio"):
        torch.testing.assert_close(getattr(dirty, field), getattr(clean, field))


def test_value_loss_clipped_takes_the_larger_squared_error() -> None:
    values, old, returns = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 2.0]]), torch.tensor([[2.0, 1.0]])
    # token 0: V_clip = 0.5 + 0.2 = 0.7 -> max(1.3², 1²) = 1.69; token 1: both errors 1.
    assert value_loss(values, old, returns, torch.ones(1, 2), clip_eps=0.2).item() == pytest.approx(
        0.5 * (1.69 + 1.0) / 2
    )
    assert value_loss(values, old, returns, torch.ones(1, 2), clip_eps=None).item() == pytest.approx(0.5)


def test_entropy_bonus_is_minus_coef_times_mean_entropy() -> None:
    entropy, mask = torch.tensor([[1.0, 3.0, 50.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    assert entropy_bonus(entropy, mask, 0.01).item() == pytest.approx(-0.01 * 2.0)
