"""The config's accepted strings (rlhf/spec/names.py, used without torch) equal the algo registries' keys, and every
algorithm preset in conf/algorithm names registered entries. (What is declared once in names.py and imported by
rlhf.algo, the estimators' traits and the IS correction's rules, needs no test of agreement.)"""

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
    (names.LOSS_AGGREGATION_NAMES, algo.LOSS_AGGREGATIONS),
    (names.IS_CORRECTION_GATINGS, algo.IS_GATINGS),
    (names.IS_CORRECTION_MODES, algo.IS_MODES),
    (names.PREFERENCE_LOSSES, algo.PREFERENCE_LOSSES),
    (names.RM_LOSSES, algo.RM_LOSSES),
]


@pytest.mark.parametrize(("config_names", "registry"), PAIRS)
def test_config_names_equal_registry_keys(config_names, registry):
    assert set(config_names) == set(registry.names())


def test_aggregation_aliases_are_the_same_functions():
    for alias, name in names.LOSS_AGGREGATION_ALIASES.items():
        assert algo.LOSS_AGGREGATIONS.get(alias) is algo.LOSS_AGGREGATIONS.get(name)
        assert names.canonical_aggregation(alias) == name


@pytest.mark.parametrize("name", sorted(names.IS_CORRECTION_TYPES))
def test_every_is_correction_type_shorthand_is_a_valid_point_of_the_grid(name):
    algo.ISCorrection(*names.IS_CORRECTION_TYPES[name])


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
        algo.ISCorrection(*a.is_correction.axes(), *a.is_correction.bounds())
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
        "flash_reinforce",
    }
    assert expected <= set(PRESETS)


def test_preset_choices_match_the_reference_algorithms():
    pick = {
        p: load_spec([f"algorithm={p}"]).algorithm
        for p in ("ppo", "grpo", "rloo", "reinforce_pp_baseline", "dr_grpo", "gspo", "dapo", "flash_reinforce")
    }
    assert pick["ppo"].advantage.estimator == "gae"
    assert pick["grpo"].advantage.estimator == "group_norm" and pick["grpo"].kl.placement == "loss"
    assert pick["rloo"].advantage.estimator == "rloo"
    assert pick["reinforce_pp_baseline"].advantage.estimator == "reinforce_baseline"
    assert pick["dr_grpo"].policy_loss.aggregation == "seq_mean_token_sum_norm"
    assert pick["gspo"].policy_loss.type == "gspo" and pick["gspo"].policy_loss.aggregation == "seq_mean"
    assert pick["dapo"].policy_loss.eps_clip_high > pick["dapo"].policy_loss.eps_clip_low
    assert pick["dapo"].filters.dynamic_filtering
    # OpenRLHF 0.11.2's flash_reinforce example: the estimator, seq binary_kl trust region 5e-3, sample mean, no KL.
    fr = pick["flash_reinforce"]
    assert fr.advantage.estimator == "flash_reinforce" and fr.kl.coef == 0
    assert fr.is_correction.axes() == ("seq", "mask", "binary_kl") and fr.is_correction.bounds() == (0.0, 0.005)
    assert names.canonical_aggregation(fr.policy_loss.aggregation) == "seq_mean"
