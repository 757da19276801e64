"""Every shipped recipe composes, validates and plans on CPU, whatever hardware it targets."""

from __future__ import annotations

import pytest

from rlhf.planning.plan import plan
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.required import MissingValues
from rlhf.spec.store import find_recipes

RECIPES = sorted(find_recipes())
REQUIRED = {
    "ppo_llama3_8b",
    "grpo_llama3_8b",
    "rloo_llama3_8b",
    "reinforce_pp_baseline_llama3_8b",
    "sft_llama3_8b",
    "rm_llama3_8b",
    "dpo_llama3_8b",
    "ppo_llama3_70b",
    "grpo_qwen2_5_0_5b",
    "grpo_qwen2_5_0_5b_h200",
    "quickstart_cpu",
    "ppo_tiny_cpu",
    "grpo_tiny_cpu",
    "dr_grpo_tiny_cpu",
    "rloo_tiny_cpu",
    "reinforce_pp_tiny_cpu",
    "reinforce_pp_baseline_tiny_cpu",
    "gspo_tiny_cpu",
    "dapo_tiny_cpu",
    "sft_tiny_cpu",
    "rm_tiny_cpu",
    "dpo_tiny_cpu",
    "opd_tiny_cpu",
}


def test_required_recipes_are_shipped():
    assert REQUIRED <= set(RECIPES)


# Recipes that leave a value to the command line (Hydra's ???; the recipe's comment shows the command): without it
# building the spec names the key, and nothing else is missing.
COMMAND_LINE = {"opd_tiny_cpu": "teacher.model_path"}


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_composes_validates_and_plans(name, tmp_path):
    overrides = [f"+recipe={name}"]
    if name in COMMAND_LINE:
        key = COMMAND_LINE[name]
        with pytest.raises(MissingValues) as missing:
            load_spec(overrides)
        assert missing.value.keys == [key]
        overrides.append(f"{key}={tmp_path}")
    spec = load_spec(overrides)
    assert validate(spec) == []
    p = plan(spec)
    assert p.fits, p.verdict()
    assert find_recipes()[name].purpose, f"{name} needs a comment line saying what it is for"


@pytest.mark.parametrize("name", [n for n in RECIPES if n.endswith("_llama3_8b") and not n.startswith(("sft", "rm"))])
def test_flagship_rl_recipes_use_the_hybrid_engine(name):
    spec = load_spec([f"+recipe={name}"])
    assert spec.placement.name == "colocate_all" or spec.algorithm.family == "dpo"
    if spec.algorithm.family == "rl":
        assert (spec.rollout.num_engines, spec.rollout.tensor_parallel_size) == (4, 2)
