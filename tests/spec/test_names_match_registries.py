"""The config's accepted strings (rlhf/spec/names.py, used without torch) equal the algo registries' keys, and every
algorithm preset in conf/algorithm names registered entries."""

from __future__ import annotations

import pytest

import rlhf.algo as algo
from rlhf.spec import names
from rlhf.spec.build import load_spec
from rlhf.spec.paths import conf_dir

PAIRS = [
    (names.ADVANTAGE_ESTIMATORS, algo.ADVANTAGE_ESTIMATORS),
    (names.POLICY_LOSSES, algo.POLICY_LOSSES),
    (names.KL_ESTIMATORS, algo.KL_ESTIMATORS),
    (names.LOSS_AGGREGATIONS, algo.LOSS_AGGREGATIONS),
    (tuple(n for n in names.IS_CORRECTIONS if n != "none"), algo.IS_CORRECTIONS),
    (names.PREFERENCE_LOSSES, algo.PREFERENCE_LOSSES),
    (names.RM_LOSSES, algo.RM_LOSSES),
]


@pytest.mark.parametrize(("config_names", "registry"), PAIRS)
def test_config_names_equal_registry_keys(config_names, registry):
    assert set(config_names) == set(registry.names())


def test_group_and_critic_estimators_agree_with_the_registry():
    for name in names.ADVANTAGE_ESTIMATORS:
        est = algo.ADVANTAGE_ESTIMATORS.get(name)
        assert est.is_group == (name in names.GROUP_ESTIMATORS), name
        assert est.needs_critic == (name in names.CRITIC_ESTIMATORS), name
        assert est.teacher == (name in names.TEACHER_ESTIMATORS), name


PRESETS = sorted(p.stem for p in (conf_dir() / "algorithm").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_algorithm_preset_names_registered_entries(preset):
    a = load_spec([f"algorithm={preset}"]).algorithm
    assert a.name == preset
    if a.family == "rl":
        algo.ADVANTAGE_ESTIMATORS.get(a.advantage.estimator)
        algo.POLICY_LOSSES.get(a.policy_loss.type)
        algo.KL_ESTIMATORS.get(a.kl.estimator)
        algo.LOSS_AGGREGATIONS.get(a.policy_loss.aggregation)
        if a.is_correction.type != "none":
            algo.IS_CORRECTIONS.get(a.is_correction.type)
    elif a.family == "dpo":
        algo.PREFERENCE_LOSSES.get(a.preference.loss)
    elif a.family == "rm":
        algo.RM_LOSSES.get(a.rm.loss)


def test_expected_presets_exist():
    expected = {
        "ppo",
        "grpo",
        "dr_grpo",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "gspo",
        "dapo",
        "sft",
        "rm",
        "dpo",
        "ipo",
        "cdpo",
        "kto",
        "simpo",
        "orpo",
        "opd",
    }
    assert expected <= set(PRESETS)


def test_preset_choices_match_the_reference_algorithms():
    pick = {
        p: load_spec([f"algorithm={p}"]).algorithm
        for p in ("ppo", "grpo", "rloo", "reinforce_pp_baseline", "dr_grpo", "gspo", "dapo")
    }
    assert pick["ppo"].advantage.estimator == "gae"
    assert pick["grpo"].advantage.estimator == "group_norm" and pick["grpo"].kl.placement == "loss"
    assert pick["rloo"].advantage.estimator == "rloo"
    assert pick["reinforce_pp_baseline"].advantage.estimator == "reinforce_baseline"
    assert pick["dr_grpo"].policy_loss.aggregation == "seq_mean_token_sum_norm"
    assert pick["gspo"].policy_loss.type == "gspo" and pick["gspo"].policy_loss.aggregation == "seq_mean"
    assert pick["dapo"].policy_loss.eps_clip_high > pick["dapo"].policy_loss.eps_clip_low
    assert pick["dapo"].filters.dynamic_filtering
