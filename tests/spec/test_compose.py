"""Composition: typed schema errors at compose time, recipes from names and files, derived values."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from rlhf.spec import derive
from rlhf.spec.build import compose, load_spec
from rlhf.spec.store import find_recipes


def test_unknown_key_fails_naming_the_full_key():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as e:
        compose(["+recipe=grpo_llama3_8b", "trainer.no_such_key=1"])
    assert "trainer.no_such_key" in str(e.value) or "trainer.no_such_key" in str(e.value.__cause__)


def test_wrong_type_fails_naming_the_full_key():
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        compose(["trainer.zero_stage=three"])
    assert "trainer.zero_stage" in str(e.value) + str(e.value.__cause__)


def test_unknown_key_in_a_recipe_file_fails(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("# @package _global_\ntrainer:\n  zero_stag: 3\n")
    with pytest.raises(Exception) as e:
        compose([f"+recipe={bad}"])
    assert "zero_stag" in str(e.value) + str(e.value.__cause__)


def test_command_line_beats_recipe_beats_group_defaults():
    spec = load_spec(["+recipe=grpo_llama3_8b"])
    assert spec.trainer.zero_stage == 3 and spec.algorithm.name == "grpo" and spec.recipe == "grpo_llama3_8b"
    assert load_spec(["+recipe=grpo_llama3_8b", "trainer.zero_stage=2"]).trainer.zero_stage == 2


def test_recipe_given_as_a_file_is_accepted(tmp_path):
    src = find_recipes()["grpo_tiny_cpu"].path
    mine = tmp_path / "my_grpo.yaml"
    mine.write_text(src.read_text().replace("max_steps: 4", "max_steps: 9"))
    spec = load_spec([f"+recipe={mine}"])
    assert spec.trainer.max_steps == 9 and spec.recipe == "my_grpo"


def test_user_recipe_folder_from_env(tmp_path, monkeypatch):
    (tmp_path / "mine_cpu.yaml").write_text("# @package _global_\n# my own\ndefaults:\n  - override /algorithm: rloo\n")
    monkeypatch.setenv("RLHF_RECIPE_PATH", str(tmp_path))
    assert find_recipes()["mine_cpu"].purpose == "my own"
    assert load_spec(["+recipe=mine_cpu"]).algorithm.name == "rloo"


def test_gradient_accumulation_is_derived_never_typed():
    d = derive(load_spec(["+recipe=grpo_llama3_8b"]))
    # 1024 samples per optimizer step / (4 per device x 8 devices)
    assert d.grad_accum["policy"] == 32
    assert d.samples_per_step == 128 * 8
    assert d.roles == ("policy", "reference", "reward", "rollout")


def test_roles_follow_from_the_algorithm():
    ppo = derive(load_spec(["+recipe=ppo_llama3_8b"]))
    assert "critic" in ppo.roles
    grpo_no_kl = derive(load_spec(["+recipe=grpo_tiny_cpu", "algorithm.kl.coef=0"]))
    assert grpo_no_kl.roles == ("policy", "rollout")
    assert derive(load_spec(["+recipe=sft_tiny_cpu"])).roles == ("policy",)
    assert derive(load_spec(["+recipe=dpo_tiny_cpu"])).roles == ("policy", "reference")
    assert derive(load_spec(["+recipe=dpo_tiny_cpu", "algorithm=simpo"])).roles == ("policy",)


def test_an_agent_may_leave_scoring_to_a_reward_source():
    from rlhf.spec import validate

    spec = load_spec(["+recipe=agent_arith_tiny_cpu", "reward.verifier=exact"])
    assert validate(spec) == []
    assert derive(spec).reward_source == "verifier"
    assert derive(load_spec(["+recipe=agent_arith_tiny_cpu"])).reward_source == "agent"
