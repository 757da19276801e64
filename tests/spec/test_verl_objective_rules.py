"""The rules of the policy losses taken from veRL (cispo, gpg) and of the keys a converted veRL recipe writes: a dual
clip only where there is a clipped surrogate, a lower clip bound >= 1 only for cispo, null reward clip accepted."""

from __future__ import annotations

import pytest

from rlhf.spec import validate
from rlhf.spec.build import load_spec

CPU_RL = ["+recipe=grpo_tiny_cpu"]


def error_keys(overrides: list[str]) -> list[str]:
    return [e.key for e in validate(load_spec(CPU_RL + overrides))]


@pytest.mark.parametrize("algorithm", ["cispo", "gpg"])
def test_the_presets_validate(algorithm):
    assert error_keys([f"algorithm={algorithm}"]) == []


@pytest.mark.parametrize("algorithm", ["cispo", "gpg"])
def test_no_dual_clip_without_a_clipped_surrogate(algorithm):
    assert error_keys([f"algorithm={algorithm}", "algorithm.policy_loss.dual_clip=3.0"]) == [
        "algorithm.policy_loss.dual_clip"
    ]


def test_a_lower_clip_bound_past_one_is_cispos_alone():
    assert error_keys(["algorithm=cispo", "algorithm.policy_loss.eps_clip_low=10.0"]) == []
    assert error_keys(["algorithm.policy_loss.eps_clip_low=10.0"]) == ["algorithm.policy_loss.eps_clip_low"]


def test_the_keys_a_converted_verl_recipe_writes_validate():
    overrides = [
        "reward.clip_range=null",
        "algorithm.kl.placement=reward",
        "algorithm.kl.before_baseline=true",
        "algorithm.policy_loss.aggregation=token_sum",
        "algorithm.policy_loss.terms_aggregation=policy",
        "algorithm.policy_loss.aggregation_norm_from=micro_batch_width",
        "algorithm.kl.estimator=abs",
    ]
    spec = load_spec(CPU_RL + overrides)
    assert validate(spec) == []
    assert spec.reward.clip_range is None
    assert spec.algorithm.kl.before_baseline is True
