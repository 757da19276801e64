"""The steps a run trains and the line that says why (rlhf.pipelines.step_count): the issue's case, 500 prompts at
16 per step with trainer.max_steps=40, trains 31 steps and says so; a cap the data meets, no cap, a warm-up and data
too small for one step."""

from __future__ import annotations

import pytest

from rlhf.errors import UserError
from rlhf.pipelines.step_count import count_steps


def rl(rows: int, per_step: int, max_steps: int | None, passes: int = 1, warmup: int = 0):
    return count_steps(
        rows,
        per_step,
        "rollout.prompts_per_step",
        passes,
        "trainer.num_episodes",
        max_steps,
        unit="prompts",
        warmup=warmup,
    )


def test_fewer_prompts_than_max_steps_asks_for_trains_fewer_steps_and_says_why():
    count = rl(500, 16, 40)
    assert count.steps == 31
    assert count.line() == (
        "steps: 31, not trainer.max_steps=40: the data gives only 500 prompts / 16 per step "
        "(rollout.prompts_per_step) = 31 per pass (4 left over each pass) x 1 pass (trainer.num_episodes); raise "
        "trainer.num_episodes (or add data) to train longer"
    )
    assert count.params() == {"run.steps": "31", "run.steps_why": count.line().removeprefix("steps: 31, ")}


def test_a_cap_the_data_meets_and_no_cap_say_what_decided():
    assert rl(500, 16, 40, passes=2).line().startswith("steps: 40, trainer.max_steps=40 (the data would give 62:")
    assert rl(512, 16, None).line() == (
        "steps: 32, 512 prompts / 16 per step (rollout.prompts_per_step) = 32 per pass x 1 pass (trainer.num_episodes)"
    )


def test_an_sft_warm_up_is_counted_before_the_rl_steps():
    count = rl(500, 4, 40, warmup=150)
    assert (count.steps, count.main) == (190, 40)
    assert count.line().startswith("steps: 190 = 150 SFT warm-up (sft_warmup.steps) + 40 RL, trainer.max_steps=40")


def test_data_that_cannot_fill_one_step_names_the_key():
    with pytest.raises(UserError, match=r"3 samples cannot fill one trainer.global_batch=8"):
        count_steps(3, 8, "trainer.global_batch", 1, "trainer.epochs", None, unit="samples")
