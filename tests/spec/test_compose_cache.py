"""Composed configs are reused within a process (Hydra's compose is most of a validation's time), but never stale:
a changed file in a config folder composes afresh, a caller's edits never reach the next caller, and a recipe named
by its file is read as the file is now."""

from __future__ import annotations

import os

from rlhf.spec.build import compose, load_spec

RECIPE = "# @package _global_\ndefaults:\n  - /recipe/grpo_tiny_cpu\nseed: {seed}\n"


def test_a_caller_editing_its_config_does_not_change_the_next_one():
    first = compose(["+recipe=grpo_tiny_cpu"])
    first.trainer.lr = 5.0
    assert compose(["+recipe=grpo_tiny_cpu"]).trainer.lr != 5.0


def test_a_recipe_changed_in_a_config_folder_is_composed_afresh(tmp_path):
    (tmp_path / "recipe").mkdir()
    mine = tmp_path / "recipe" / "mine.yaml"
    mine.write_text(RECIPE.format(seed=1))
    assert load_spec(["+recipe=mine"], config_dir=tmp_path).seed == 1
    mine.write_text(RECIPE.format(seed=22))
    os.utime(mine, ns=(mine.stat().st_atime_ns, mine.stat().st_mtime_ns + 10**9))  # a coarse clock: still newer
    assert load_spec(["+recipe=mine"], config_dir=tmp_path).seed == 22


def test_a_recipe_named_by_its_file_is_read_as_it_is_now(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(RECIPE.format(seed=3))
    assert load_spec([f"+recipe={mine}"]).seed == 3
    mine.write_text(RECIPE.format(seed=4))
    assert load_spec([f"+recipe={mine}"]).seed == 4


def test_a_config_composed_with_a_folder_held_open_is_not_served_once_it_is_closed(tmp_path):
    """A plugin's conf folder held on the search path (config_dirs_on_search_path, as the toy backends' tests do):
    the same overrides composed after it is closed must not come from the cache."""
    import pytest
    from hydra.errors import MissingConfigException

    from rlhf.spec.paths import config_dirs_on_search_path

    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "only_here.yaml").write_text(RECIPE.format(seed=5))
    with config_dirs_on_search_path(tmp_path):
        assert compose(["+recipe=only_here"]).seed == 5
    with pytest.raises(MissingConfigException):
        compose(["+recipe=only_here"])


# Override lists as tests and users write them: a recipe, then values (lists, nulls, strings, interpolations, a dict
# merged into a section, a key set twice); and lists whose values come first or between groups (composed whole).
SAME_AS_HYDRA = [
    ["+recipe=grpo_tiny_cpu", "trainer.max_steps=3", "rollout.temperature=0.7", "eval.steps=0"],
    ["+recipe=ppo_tiny_cpu", "data.train_files=[a.jsonl,b.jsonl]", "reward.clip_range=null", "seed=1"],
    ["+recipe=grpo_tiny_cpu", "logging.run_name=x y", "trainer.max_steps=${trainer.epochs_per_rollout}"],
    ["+recipe=grpo_tiny_cpu", "trainer.fsdp2={cpu_offload: true}", "trainer.backend=fsdp2"],
    ["+recipe=grpo_tiny_cpu", "trainer.lr=1e-3", "trainer.lr=2e-3"],
    ["+recipe=sft_tiny_cpu", "rollout=hf", "trainer.lr=1e-3"],
    ["+recipe=grpo_tiny_cpu", "trainer.lr=1e-3", "rollout=hf", "trainer.max_steps=2"],
    ["algorithm=grpo", "model=tiny", "trainer.lr=1e-3"],
]


def test_values_set_after_a_composed_head_give_hydras_whole_composition():
    """compose() composes the overrides before the final run of plain ``a.b=value`` ones once, and sets those on a
    copy (Hydra's own step); the result is what Hydra's compose of the whole list gives."""
    from omegaconf import OmegaConf

    from rlhf.spec.build import _composed

    for overrides in SAME_AS_HYDRA:
        fast = OmegaConf.to_container(compose(overrides), resolve=False)
        whole = OmegaConf.to_container(_composed(overrides, None, None, cache=False), resolve=False)
        assert fast == whole, overrides


def test_a_value_override_hydra_refuses_is_refused_with_hydras_message():
    import pytest
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=r"Could not override 'trainer.nope'"):
        compose(["+recipe=grpo_tiny_cpu", "trainer.nope=1"])
    with pytest.raises(ConfigCompositionException, match=r"Error merging override trainer.max_steps=abc"):
        compose(["+recipe=grpo_tiny_cpu", "trainer.max_steps=abc"])
