"""Did-you-mean: a mistyped config key, group option or recipe name is answered with the closest names first, then
the list; ``rlhf-plan`` on a layout that does not fit exits 1 pointing at ``--auto``."""

from __future__ import annotations

import pytest

from rlhf.cli.common import explain_compose_error
from rlhf.cli.plan import main as rlhf_plan
from rlhf.spec.build import compose, load_spec
from rlhf.spec.suggest import did_you_mean, missing_option_hint, nearest
from rlhf.spec.validate import SpecInvalid


def _compose_error(overrides: list[str]) -> str:
    with pytest.raises(Exception) as e:
        compose(overrides)
    return explain_compose_error(e.value)


def test_nearest_puts_the_closest_first_and_leaves_out_what_only_shares_a_prefix():
    assert nearest("zero_stag", ["zero_stage", "betas", "eps", "max_steps"]) == ["zero_stage"]
    assert nearest("grpoo", ["grpo", "rloo", "ppo", "sft"])[0] == "grpo"
    assert nearest("xyz", ["grpo", "rloo"]) == []


@pytest.mark.parametrize(
    ("names", "said"),
    [
        ([], ""),
        (["a"], "did you mean a?"),
        (["a", "b"], "did you mean a or b?"),
        (["a", "b", "c"], "did you mean a, b or c?"),
    ],
)
def test_did_you_mean_reads_as_a_sentence(names, said):
    assert did_you_mean(names) == said


def test_a_missing_option_hint_reads_hydras_list_and_ignores_other_messages():
    message = (
        "In 'config': Could not find 'algorithm/grpoo'\n\nAvailable options in 'algorithm':\n\tdpo\n\tgrpo\n\trloo\n"
    )
    assert missing_option_hint(message).startswith("did you mean algorithm=grpo")
    assert missing_option_hint(
        "Could not find 'recipe/grpo_tiny_cpus'\nAvailable options in 'recipe':\n\tgrpo_tiny_cpu\n"
    ) == ("did you mean +recipe=grpo_tiny_cpu?")
    assert missing_option_hint("Could not override 'algorithm'") == ""


def test_a_mistyped_key_on_the_command_line_is_answered_with_the_key_meant():
    message = _compose_error(["+recipe=grpo_tiny_cpu", "trainer.zero_stag=3"])
    assert message.startswith("trainer.zero_stag: no such config key; did you mean trainer.zero_stage?; valid keys")
    assert "trainer.betas" not in message.split("; valid keys")[0]  # not every trainer.* key sharing the prefix
    assert "did you mean algorithm.kl.coef?" in _compose_error(["+recipe=grpo_tiny_cpu", "algorithm.kl.coeff=0.1"])
    assert "did you mean trainer?" in _compose_error(["+recipe=grpo_tiny_cpu", "trainr.lr=0.1"])


def test_a_mistyped_group_option_and_recipe_name_are_answered_with_the_closest_ones_then_the_list():
    message = _compose_error(["+recipe=grpo_tiny_cpu", "algorithm=grpoo"])
    first, second = message.splitlines()[:2]
    assert "Could not find 'algorithm/grpoo'" in first and second.startswith("did you mean algorithm=grpo")
    assert "Available options in 'algorithm'" in message  # the whole list still follows
    message = _compose_error(["+recipe=grpo_tiny_cpus"])
    assert message.splitlines()[1].startswith("did you mean +recipe=grpo_tiny_cpu")


def test_a_mistyped_key_in_a_recipe_file_names_the_file_and_the_key_meant(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  zero_stag: 3\n")
    message = _compose_error([f"hydra.searchpath=[file://{tmp_path}]", "+recipe=mine"])
    assert (
        "In 'recipe/mine'" in message
        and "trainer.zero_stag: no such config key; did you mean trainer.zero_stage?" in (message)
    )


def test_a_mistyped_key_added_with_plus_is_answered_with_the_key_meant():
    with pytest.raises(
        SpecInvalid, match=r"trainer\.zero_stag=3: no such config key; did you mean trainer\.zero_stage\?"
    ):
        load_spec(["+recipe=grpo_tiny_cpu", "+trainer.zero_stag=3"])


def test_rlhf_plan_exits_1_on_a_layout_that_does_not_fit_and_names_auto(capsys):
    one_gpu = [
        "+recipe=grpo_llama3_8b",
        "hardware=1xh100",
        "placement.devices.policy=1",
        "rollout.num_engines=1",
        "rollout.tensor_parallel_size=1",
    ]
    with pytest.raises(SystemExit) as e:
        rlhf_plan(one_gpu)
    err = capsys.readouterr().err
    assert e.value.code == 1
    assert "does not fit: devices of policy+reference+reward+rollout need" in err
    assert f"`rlhf-plan --auto {' '.join(one_gpu)}` searches the layouts that fit" in err
    rlhf_plan(["+recipe=grpo_llama3_8b"])  # a layout that fits returns: exit 0
    assert "verdict: fits" in capsys.readouterr().out
