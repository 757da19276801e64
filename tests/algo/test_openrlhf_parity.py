"""Our numerics against OpenRLHF 0.11.2's own functions on random tensors: the KL estimators with and without the
unbiased gradient, the policy loss over every valid point of the IS-correction grid (and the same refusals), both
loss_agg_modes, and the advantages of every estimator, flash_reinforce included. Values and gradients.

The functions come from the wheel (tests/algo/openrlhf_reference.py says how they are loaded without their GPU-only
imports); without the wheel these tests are skipped, saying where to put it.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from algo_helpers import random_mask
from openrlhf_reference import HOW_TO_GET, load, wheel_path

from rlhf.algo import ISCorrection, LossNormalizer, compute_advantages_and_returns, compute_approx_kl, policy_loss
from rlhf.spec import names

SEEDS = range(3)
# What OpenRLHF 0.11.2 has: the entries taken from veRL (cispo, gpg, abs) have their own parity tests
# (tests/algo/test_verl_parity.py).
OPENRLHF_KL_ESTIMATORS = ("k1", "k2", "k3")
OPENRLHF_POLICY_LOSSES = ("ppo", "gspo")


@pytest.fixture(scope="module")
def ref() -> SimpleNamespace:
    wheel = wheel_path()
    if wheel is None:
        pytest.skip(HOW_TO_GET)
    return load(wheel)


def _grad(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad


# -- KL ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", OPENRLHF_KL_ESTIMATORS)
@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("with_old", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_compute_approx_kl_matches_openrlhf(ref, estimator, unbiased, with_old, seed):
    g = torch.Generator().manual_seed(seed)
    # Log-ratios up to +-30, and -100 in the first column (k3's exp(100) overflows fp32 without 0.11.2's bound);
    # old log-probs up to 10 away (w clamped at 10).
    log_probs = torch.randn(4, 7, generator=g) * 10 - 5
    base = log_probs + torch.randn(4, 7, generator=g) * 10
    base[:, 0] = log_probs[:, 0] + 100.0
    old = (log_probs + torch.randn(4, 7, generator=g) * 3) if with_old else None

    def theirs(lp):
        return ref.compute_approx_kl(lp, base, log_probs_old=old, kl_estimator=estimator, unbiased_gradient=unbiased)

    def ours(lp):
        return compute_approx_kl(lp, base, estimator, old_log_probs=old, unbiased_gradient=unbiased)

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)
    assert torch.isfinite(grad_o).all()


# -- policy loss ---------------------------------------------------------------------------------------------------

GRID = list(itertools.product(names.IS_CORRECTION_LEVELS, names.IS_CORRECTION_MODES, names.IS_CORRECTION_GATINGS))


@pytest.mark.parametrize(("level", "mode", "gating"), GRID)
@pytest.mark.parametrize("low", [0.0, 0.5])
def test_the_same_is_correction_combinations_are_refused(ref, level, mode, gating, low):
    def refused(make) -> bool:
        try:
            make()
        except ValueError:
            return True
        return False

    theirs = refused(
        lambda: ref.PolicyLoss(
            is_correction_level=level,
            is_correction_mode=mode,
            is_correction_gating=gating,
            is_correction_threshold=[low, 5.0],
        )
    )
    assert refused(lambda: ISCorrection(level, mode, gating, low, 5.0)) == theirs


def _probabilities_batch(g: torch.Generator, batch: int, length: int) -> tuple[torch.Tensor, ...]:
    # Sampled-token probabilities in (0, 1): trainer q, rollout p near it, the current policy near q.
    q = torch.rand(batch, length, generator=g) * 0.9 + 0.05
    p = (q + torch.randn(batch, length, generator=g) * 0.08).clamp(0.01, 0.99)
    old = q.log()
    rollout = p.log()
    log_probs = old + torch.randn(batch, length, generator=g) * 0.2
    advantages = torch.randn(batch, length, generator=g)
    return log_probs, old, rollout, advantages


def _band(gating: str, level: str, old, rollout, mask) -> list[float]:
    """A band on the gated statistic that filters about half of the units: from the median up for the ratio,
    up to the median for a divergence (an upper bound only)."""
    p, q = rollout.exp().clamp(1e-6, 1 - 1e-6), old.exp().clamp(1e-6, 1 - 1e-6)
    if gating == "ratio":
        stat = old - rollout
    elif gating == "binary_kl":
        stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
    else:
        stat = (p - q).abs()
    stat = (stat * mask).sum(-1) / mask.sum(-1) if level == "seq" else stat[mask.bool()]
    if gating == "ratio":
        return [float(stat.exp().median()), 100.0]
    return [0.0, float(stat.median())]


VALID = [(lv, m, gt) for lv, m, gt in GRID if not (m == "clip" and (lv == "seq" or gt != "ratio"))]


@pytest.mark.parametrize(("level", "mode", "gating"), VALID)
@pytest.mark.parametrize("loss_type", OPENRLHF_POLICY_LOSSES)
@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", SEEDS)
def test_policy_loss_matches_openrlhf(ref, level, mode, gating, loss_type, agg_mode, seed):
    g = torch.Generator().manual_seed(seed)
    batch, length = 5, 9
    log_probs, old, rollout, advantages = _probabilities_batch(g, batch, length)
    mask = random_mask(g, batch, length)
    threshold = _band(gating, level, old, rollout, mask)
    dual_clip = 3.0 if seed % 2 else None
    step = {"dp_size": 2, "batch_num_tokens": float(mask.sum()) * 0.75, "global_batch_size": batch * 0.75}
    theirs_fn = ref.PolicyLoss(
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        dual_clip=dual_clip,
        token_level_loss=agg_mode == "token-mean",
        policy_loss_type=loss_type,
        is_correction_level=level,
        is_correction_mode=mode,
        is_correction_gating=gating,
        is_correction_threshold=list(threshold),
    )
    lp_t = log_probs.clone().requires_grad_()
    loss_t, clip_t, ppo_kl_t, vllm_kl_t, filter_t = theirs_fn(
        lp_t, old, advantages, action_mask=mask, rollout_log_probs=rollout, **step
    )
    loss_t.backward()

    lp_o = log_probs.clone().requires_grad_()
    out = policy_loss(
        lp_o,
        old,
        advantages,
        mask,
        loss_type=loss_type,
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        dual_clip=dual_clip,
        rollout_log_probs=rollout,
        is_correction=ISCorrection(level, mode, gating, *threshold),
        aggregation=agg_mode,
        norm=LossNormalizer(step["batch_num_tokens"], step["global_batch_size"], step["dp_size"]),
    )
    out.loss.backward()
    torch.testing.assert_close(out.loss, loss_t)
    torch.testing.assert_close(lp_o.grad, lp_t.grad)
    torch.testing.assert_close(out.clip_ratio, clip_t)
    torch.testing.assert_close(out.ppo_kl, ppo_kl_t)
    if vllm_kl_t is None:  # OpenRLHF reports the mismatch only while correcting a token-level loss
        assert filter_t is None and out.is_filter_ratio is None
    else:
        torch.testing.assert_close(out.rollout_kl, vllm_kl_t)
        torch.testing.assert_close(out.is_filter_ratio, filter_t)
        if level != "off":
            assert 0 < float(filter_t) < 1, "the band should filter some units and keep others"


@pytest.mark.parametrize("level", ["token", "seq"])
def test_binary_kl_rounding_below_zero_drops_units_in_openrlhf_but_not_here(ref, level):
    # The one deliberate difference (rlhf.algo.is_correction.binary_kl): rollout and trainer agree to 1e-7, the
    # binary KL's two terms cancel to a little below 0 in fp32, and OpenRLHF's band [0, delta] drops those units.
    g = torch.Generator().manual_seed(0)
    old = (torch.rand(16, 8, generator=g) * 0.9 + 0.05).log()
    rollout = old + torch.randn(16, 8, generator=g) * 1e-7
    mask = torch.ones(16, 8)
    theirs = ref.PolicyLoss(
        is_correction_level=level, is_correction_gating="binary_kl", is_correction_threshold=[0.0, 0.005]
    )(old.clone(), old, torch.ones(16, 8), action_mask=mask, rollout_log_probs=rollout)
    ours = policy_loss(
        old.clone(),
        old,
        torch.ones(16, 8),
        mask,
        rollout_log_probs=rollout,
        is_correction=ISCorrection(level, "mask", "binary_kl", 0.0, 0.005),
    )
    # how many units round below zero depends on the torch build (seq level: 1/16 with torch 2.13.0+cpu): some do
    assert float(theirs[4]) > (0.1 if level == "token" else 0.0)
    assert float(ours.is_filter_ratio) == 0.0


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("token_level", [True, False])
def test_value_loss_matches_openrlhf(ref, clip, token_level):
    from rlhf.algo import value_loss

    g = torch.Generator().manual_seed(7)
    values, old, returns = (torch.randn(4, 6, generator=g) for _ in range(3))
    mask = random_mask(g, 4, 6)
    theirs = ref.ValueLoss(clip_eps=clip, token_level_loss=token_level)(values, old, returns, action_mask=mask)
    aggregation = "token_mean" if token_level else "seq_mean"
    ours = value_loss(values, old, returns, mask, clip_eps=clip, aggregation=aggregation)
    torch.testing.assert_close(ours, theirs)


# -- advantages ----------------------------------------------------------------------------------------------------


def _openrlhf_advantages(ref, estimator, rewards, mask, kl, values, kl_coef, gamma, lambd, n, no_std_norm, sizes):
    """OpenRLHF's compute_advantages_and_returns on micro-batches of the given sizes (in prompt order)."""
    args = SimpleNamespace(
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator=estimator, gamma=gamma, lambd=lambd, no_std_norm=no_std_norm)
        ),
        rollout=SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=None),
        reward=SimpleNamespace(clip_range=(-10.0, 10.0), overlong_buffer_len=None, stop_properly_penalty_coef=None),
        data=SimpleNamespace(max_len=64),
    )
    maker = SimpleNamespace(strategy=SimpleNamespace(args=args), kl_ctl=SimpleNamespace(value=kl_coef))
    maker.advantage_estimator = estimator
    cls = ref.RemoteExperienceMaker
    for method in ("get_advantages_and_returns", "get_cumulative_returns"):
        setattr(maker, method, getattr(cls, method).__get__(maker))
    experiences, start = [], 0
    for size in sizes:
        part = slice(start, start + size)
        experiences.append(
            SimpleNamespace(
                rewards=rewards[part].clone(),
                index=list(range(start, start + size)),
                kl=kl[part].clone(),
                action_mask=mask[part],
                values=values[part].clone(),
                info={},
            )
        )
        start += size
    experiences = cls.compute_advantages_and_returns(maker, experiences)
    return (torch.cat([e.advantages for e in experiences]), torch.cat([e.returns for e in experiences]))


CASES = [
    ("gae", 1),
    ("reinforce", 1),
    ("reinforce_baseline", 4),
    ("rloo", 4),
    ("group_norm", 4),
    ("dr_grpo", 4),
    ("flash_reinforce", 1),
    ("flash_reinforce", 4),
]


@pytest.mark.parametrize(("estimator", "n"), CASES)
@pytest.mark.parametrize("no_std_norm", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_advantages_and_returns_match_openrlhf(ref, estimator, n, no_std_norm, seed):
    g = torch.Generator().manual_seed(seed)
    batch, length = 12, 7
    mask = random_mask(g, batch, length)
    rewards = torch.randn(batch, generator=g) * 3
    kl = torch.randn(batch, length, generator=g) * 0.2 * mask
    values = torch.randn(batch, length, generator=g)
    gamma = 0.9 if estimator in ("gae", "reinforce") else 1.0
    common = dict(kl_coef=0.05, gamma=gamma, lambd=0.95, n=n, no_std_norm=no_std_norm)
    adv_t, ret_t = _openrlhf_advantages(ref, estimator, rewards, mask, kl, values, sizes=[5, 3, 4], **common)
    out = compute_advantages_and_returns(
        rewards,
        mask,
        estimator=estimator,
        kl=kl,
        values=values,
        kl_coef=0.05,
        gamma=gamma,
        lambd=0.95,
        n_samples_per_prompt=n,
        no_std_norm=no_std_norm,
    )
    # Compared where the losses read them: OpenRLHF leaves whitening offsets on masked positions.
    on = mask.bool()
    torch.testing.assert_close(out.advantages[on], adv_t[on])
    torch.testing.assert_close(out.returns[on], ret_t[on])
