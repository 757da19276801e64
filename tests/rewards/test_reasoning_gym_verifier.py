"""reward.verifier=reasoning_gym: each row scored by its own task's score_answer, through the reward source."""

from __future__ import annotations

import json

import pytest

from rlhf.data import load_rows
from rlhf.rewards import RewardError, make_reward_source, verify
from rlhf.spec.build import load_spec

reasoning_gym = pytest.importorskip("reasoning_gym")

SOURCES = ["reasoning_gym:chain_sum?size=6&seed=4", "reasoning_gym:spell_backward?size=4&seed=9&max_word_len=5"]


@pytest.fixture(scope="module")
def rows():
    return load_rows(SOURCES)


def test_each_sample_gets_its_own_tasks_score(rows):
    labels = list(rows["label"])
    right = list(rows["output"])
    res = verify("reasoning_gym", labels, labels, right, labels)
    assert res.scores == [1.0] * len(rows) and res.extra_logs["verifier_timeout"] == [0.0] * len(rows)
    wrong = [a + "9" for a in right]
    assert verify("reasoning_gym", labels, labels, wrong, labels).scores == [0.0] * len(rows)


def test_scores_are_the_tasks_own_score_answer(rows):
    row = rows[7]  # a spell_backward row
    info = json.loads(row["label"])
    task = reasoning_gym.create_dataset(info["task"], **info["config"])
    for answer in (row["output"], row["output"][::-1], "", row["output"] + " and more"):
        expected = task.score_answer(answer=answer.strip(), entry=task[info["index"]])
        got = verify("reasoning_gym", ["q"], ["p"], [answer], [row["label"]])
        assert got.rewards == [pytest.approx(expected)]
        assert got.scores == [float(expected >= 1.0)]  # strict correctness for pass@k


def test_an_answer_tag_and_trailing_special_tokens_are_read_like_the_bare_answer(rows):
    row = rows[0]
    for response in (f"<think>add</think><answer>{row['output']}</answer>", f" {row['output']}<|end|>"):
        assert verify("reasoning_gym", ["q"], ["p"], [response], [row["label"]]).scores == [1.0]


def test_a_label_that_is_not_a_reasoning_gym_row_names_the_fix():
    with pytest.raises(RewardError, match="data.label_key=label"):
        verify("reasoning_gym", ["q"], ["p"], ["7"], ["7"])


def test_the_spec_builds_a_source_with_the_timeout(rows):
    spec = load_spec(["reward.verifier=reasoning_gym", "reward.verifier_timeout_s=3", "data.label_key=label"])
    source = make_reward_source(spec)
    assert source.options == {"timeout_s": 3.0}
    label = rows[0]["label"]
    assert source.score(["q"], ["p"], [rows[0]["output"]], [label]).scores == [1.0]
