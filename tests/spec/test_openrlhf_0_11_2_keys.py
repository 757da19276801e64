"""OpenRLHF 0.11.2's keys at validation: the IS correction's axes with its refused combinations (naming the key and
the reason), the type shorthands, the threshold's forms, flash_reinforce's rules, the unbiased KL gradient and the
loss_agg_mode names. Nothing here starts a run."""

from __future__ import annotations

import pytest

from rlhf.pipelines.rl_losses import ActorLossSettings
from rlhf.spec import validate
from rlhf.spec.build import load_spec

GRPO = ["+recipe=grpo_tiny_cpu"]
IS = "algorithm.is_correction."


def problems(overrides: list[str]) -> dict[str, str]:
    return {e.key: e.fix for e in validate(load_spec(overrides))}


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        # clip clamps a weight: only the per-token ratio is one.
        ([IS + "level=seq", IS + "mode=clip"], IS + "mode", "only the per-token ratio is a weight"),
        ([IS + "level=token", IS + "mode=clip", IS + "gating=tv", IS + "threshold=0.1"], IS + "mode", "level=token"),
        # Refused whatever the level, as OpenRLHF does.
        ([IS + "mode=clip", IS + "gating=binary_kl"], IS + "mode", "rejection filter"),
        # A divergence takes an upper bound only; the default band [0.5, 5] would reject everything.
        ([IS + "level=seq", IS + "gating=binary_kl"], IS + "threshold", "upper bound only"),
        ([IS + "level=token", IS + "gating=tv", IS + "threshold=[0.1,0.2]"], IS + "threshold", "upper bound only"),
    ],
)
def test_openrlhfs_invalid_combinations_are_refused_naming_the_key(overrides, key, words):
    found = problems(GRPO + overrides)
    assert list(found) == [key]
    assert words in found[key]


def test_a_divergence_gate_off_keeps_the_default_band():
    assert problems(GRPO + [IS + "gating=binary_kl"]) == {}


@pytest.mark.parametrize(
    ("threshold", "bounds"),
    [("0.005", (0.0, 0.005)), ("[0.005]", (0.0, 0.005)), ("[0.5,2.0]", (0.5, 2.0)), ("[0,1]", (0.0, 1.0))],
)
def test_threshold_is_high_alone_or_low_high_as_openrlhfs_flag(threshold, bounds):
    spec = load_spec(GRPO + [IS + "level=seq", IS + "gating=binary_kl", f"{IS}threshold={threshold}"])
    if bounds[0] > 0:  # a band with a lower bound is for the ratio gate
        spec = load_spec(GRPO + [IS + "level=seq", f"{IS}threshold={threshold}"])
    assert validate(spec) == []
    assert spec.algorithm.is_correction.bounds() == bounds


@pytest.mark.parametrize(
    ("threshold", "words"), [("[1,2,3]", "[LOW, HIGH]"), ("abc", "a number HIGH"), ("[2.0,1.0]", "LOW < HIGH")]
)
def test_a_malformed_threshold_is_refused(threshold, words):
    found = problems(GRPO + [IS + "level=token", f"{IS}threshold={threshold}"])
    assert list(found) == [IS + "threshold"] and words in found[IS + "threshold"]


@pytest.mark.parametrize(
    ("name", "axes"),
    [
        ("tis", ("token", "clip", "ratio")),
        ("icepop", ("token", "mask", "ratio")),
        ("seq_mask_tis", ("seq", "mask", "ratio")),
        ("none", ("off", "mask", "ratio")),
    ],
)
def test_type_shorthands_set_the_three_axes(name, axes):
    spec = load_spec(GRPO + [f"{IS}type={name}", IS + "threshold=[0.5,2.0]"])
    assert validate(spec) == []
    settings = ActorLossSettings.from_spec(spec).is_correction
    assert (settings.level, settings.mode, settings.gating, settings.low, settings.high) == (*axes, 0.5, 2.0)


def test_a_type_and_an_axis_that_disagrees_with_it_are_refused():
    found = problems(GRPO + [IS + "type=tis", IS + "gating=tv", IS + "level=token"])
    # level=token agrees with tis; gating=tv does not.
    assert list(found) == [IS + "gating"]
    assert "type=tis already sets level=token, mode=clip, gating=ratio" in found[IS + "gating"]


def test_the_axes_reach_the_actor_loss():
    spec = load_spec(GRPO + [IS + "level=seq", IS + "gating=binary_kl", IS + "threshold=0.005"])
    c = ActorLossSettings.from_spec(spec).is_correction
    assert (c.level, c.mode, c.gating, c.low, c.high) == ("seq", "mask", "binary_kl", 0.0, 0.005)


def test_flash_reinforce_needs_no_group_but_gamma_one():
    one_sample = ["algorithm=flash_reinforce", "rollout.samples_per_prompt=1", "rollout.prompts_per_step=64"]
    assert problems(GRPO + one_sample) == {}
    assert (
        "uses gamma 1" in problems(GRPO + one_sample + ["algorithm.advantage.gamma=0.9"])["algorithm.advantage.gamma"]
    )
    # A group estimator with one sample per prompt is still refused.
    group = problems(GRPO + ["rollout.samples_per_prompt=1", "rollout.prompts_per_step=64"])
    assert "rollout.samples_per_prompt" in group


def test_unbiased_gradient_needs_the_kl_as_a_loss():
    assert problems(GRPO + ["algorithm.kl.unbiased_gradient=true"]) == {}  # grpo: k3 as a loss
    found = problems(["+recipe=reinforce_pp_tiny_cpu", "algorithm.kl.unbiased_gradient=true"])
    assert (
        list(found) == ["algorithm.kl.unbiased_gradient"]
        and "placement=loss" in found["algorithm.kl.unbiased_gradient"]
    )
    spec = load_spec(GRPO + ["algorithm.kl.unbiased_gradient=true"])
    assert ActorLossSettings.from_spec(spec).kl_unbiased_gradient


@pytest.mark.parametrize(("name", "ours"), [("token-mean", "token_mean"), ("seq-mean-token-mean", "seq_mean")])
def test_openrlhf_loss_agg_mode_names_are_accepted(name, ours):
    spec = load_spec(GRPO + [f"algorithm.policy_loss.aggregation={name}"])
    assert validate(spec) == []
    assert ActorLossSettings.from_spec(spec).aggregation == ours


def test_gspo_accepts_openrlhfs_name_of_its_sequence_mean():
    overrides = GRPO + ["algorithm=gspo", "algorithm.policy_loss.aggregation=seq-mean-token-mean"]
    assert problems(overrides) == {}
    assert "algorithm.policy_loss.aggregation" in problems(
        GRPO + ["algorithm=gspo", "algorithm.policy_loss.aggregation=token-mean"]
    )
