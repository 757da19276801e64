"""The actor loss with and without a separate old-log-prob pass, and when the loop may skip that pass."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.algo import ISCorrection
from rlhf.pipelines.rl_losses import ActorLossSettings, actor_loss_fn, policy_logprobs_fn
from rlhf.pipelines.rl_roles import reuses_current_logprobs
from rlhf.spec.build import load_spec


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).float().eval()


def _batch(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    seqs = torch.randint(1, 40, (3, 10), generator=g)
    attn = torch.ones_like(seqs)
    attn[2, 8:] = 0
    action = torch.zeros(3, 9)
    action[:, 4:] = 1
    action[2, 7:] = 0
    with torch.no_grad():
        current = policy_logprobs_fn(model, {"sequences": seqs, "attention_mask": attn}, temperature=1.0)
    return {
        "sequences": seqs,
        "attention_mask": attn,
        "action_mask": action,
        "advantages": torch.randn(3, 9, generator=g) * action,
        "rollout_logprobs": (current + 0.01) * action,
        "ref_logprobs": (current - 0.05) * action,
        "kl_coef": torch.tensor([0.1]),
        "_current": current * action,
    }


SETTINGS = ActorLossSettings(
    loss_type="ppo",
    clip_eps_low=0.2,
    clip_eps_high=0.2,
    dual_clip=None,
    aggregation="token_mean",
    temperature=1.0,
    entropy_coef=None,
    kl_in_loss=True,
    kl_estimator="k3",
    is_correction=ISCorrection(),
)


def _loss_and_grads(model, mb):
    model.zero_grad()
    loss, metrics = actor_loss_fn(model, mb, None, s=SETTINGS)
    loss.backward()
    return loss.detach(), metrics, [p.grad.clone() for p in model.parameters()]


def test_missing_old_logprobs_give_the_same_loss_and_gradient_as_a_recomputed_pass():
    model = _model()
    mb = _batch(model)
    current = mb.pop("_current")
    with_pass = dict(mb, old_logprobs=current)
    loss_a, metrics_a, grads_a = _loss_and_grads(model, with_pass)
    loss_b, metrics_b, grads_b = _loss_and_grads(model, mb)
    assert torch.allclose(loss_a, loss_b, atol=1e-6)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        assert torch.allclose(ga, gb, atol=1e-6)
    assert float(metrics_b["ppo_clip_ratio"]) == 0.0
    # The experience pass's metrics come from the loss when it is skipped: rollout 0.01 above, reference 0.05 below.
    assert float(metrics_b["logprobs_diff"]) == pytest.approx(0.01, abs=1e-5)
    assert float(metrics_b["kl"]) > 0
    assert "logprobs_diff" not in metrics_a and "kl" not in metrics_a


@pytest.mark.parametrize(
    "overrides, reuses",
    [
        (["+recipe=quickstart_cpu"], True),  # one step per rollout, KL in the loss
        (["+recipe=quickstart_cpu", "trainer.epochs_per_rollout=2"], False),  # the second epoch needs the old ones
        (["+recipe=grpo_tiny_cpu"], False),  # two optimizer steps per rollout
        (["+recipe=ppo_tiny_cpu"], False),  # KL folded into the reward before training
        (["+recipe=ppo_tiny_cpu", "algorithm.kl.coef=0"], True),
    ],
)
def test_the_old_logprob_pass_is_skipped_only_for_one_step_without_kl_in_the_reward(overrides, reuses):
    assert reuses_current_logprobs(load_spec(overrides)) is reuses


def _with(**changes) -> ActorLossSettings:
    from dataclasses import replace

    return replace(SETTINGS, **changes)


@pytest.mark.parametrize(("high", "filtered"), [(1e-9, 1.0), (1.0, 0.0)])
def test_the_trust_region_gate_acts_in_the_actor_loss(high, filtered):
    # The rollout's log-probs are 0.01 above the trainer's: every token has a binary KL of order 1e-6, so a delta of
    # 1e-9 drops every sequence (no policy gradient at all) and a delta of 1 none.
    model = _model()
    mb = _batch(model)
    mb.pop("_current")
    s = _with(kl_in_loss=False, is_correction=ISCorrection("seq", "mask", "binary_kl", 0.0, high))
    model.zero_grad()
    loss, metrics = actor_loss_fn(model, mb, None, s=s)
    loss.backward()
    assert float(metrics["is_filter_ratio"]) == filtered
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert (grads.abs().sum() == 0) == (filtered == 1.0)


def test_unbiased_gradient_gives_every_kl_estimator_the_same_gradient():
    model = _model()
    mb = _batch(model)
    mb.pop("_current")
    grads = {}
    for estimator in ("k1", "k3"):
        for unbiased in (False, True):
            s = _with(kl_estimator=estimator, kl_unbiased_gradient=unbiased)
            grads[estimator, unbiased] = _grads_of(model, mb, s)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(grads["k1", True], grads["k3", True], strict=True))
    assert not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(grads["k1", False], grads["k3", False], strict=True))


def _grads_of(model, mb, s):
    model.zero_grad()
    loss, _ = actor_loss_fn(model, mb, None, s=s)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_kl_term_is_a_token_mean_whatever_the_policy_loss_aggregation():
    # OpenRLHF's actor aggregates the KL loss with aggregate_loss's default (token mean) under every loss_agg_mode.
    from rlhf.algo import compute_approx_kl, masked_mean

    model = _model()
    mb = _batch(model)
    current = mb.pop("_current")
    mask = mb["action_mask"]
    _, metrics = actor_loss_fn(model, mb, None, s=_with(aggregation="seq_mean"))
    expected = 0.1 * masked_mean(compute_approx_kl(current, mb["ref_logprobs"], "k3"), mask)
    assert float(metrics["kl_loss"]) == pytest.approx(float(expected), rel=1e-5)


def test_logging_verl_metrics_adds_veRLs_actor_names_logged_as_they_are():
    from rlhf.pipelines.rl_metrics import logged_names

    assert ActorLossSettings.from_spec(load_spec(["+recipe=grpo_tiny_cpu", "logging.verl_metrics=true"])).verl_metrics
    model = _model()
    mb = _batch(model)
    mb["old_logprobs"] = mb.pop("_current") - 0.3 * mb["action_mask"]  # every ratio e^0.3: clipped where A > 0
    _, ours = actor_loss_fn(model, mb, None, s=SETTINGS)
    _, both = actor_loss_fn(model, mb, None, s=_with(verl_metrics=True, dual_clip=3.0))
    verl = {"actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"}
    assert set(both) == set(ours) | verl and not verl & set(ours)
    assert float(both["actor/pg_clipfrac"]) == float(both["ppo_clip_ratio"]) > 0
    logged = logged_names(both)
    assert verl <= set(logged) and "train/ppo_clip_ratio" in logged and "train/actor/ppo_kl" not in logged
