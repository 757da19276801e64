"""DAPO overlong penalty, ProRL stop-properly penalty, dynamic filtering predicate, reward normalisation."""

from __future__ import annotations

import pytest
import torch

from rlhf.algo.shaping import keep_group, normalize_rewards, overlong_penalty, stop_properly_penalty


def test_overlong_penalty_ramps_over_the_buffer() -> None:
    # max_new_tokens 20, buffer 4: expected length 16; exceed = min(len - 16, 4); penalty -exceed / 4 * 2.
    lengths = torch.tensor([10, 16, 17, 19, 20, 25])
    shaped = overlong_penalty(torch.ones(6), lengths, max_new_tokens=20, buffer_len=4, penalty_factor=2.0)
    assert shaped.tolist() == pytest.approx([1.0, 1.0, 0.5, -0.5, -1.0, -1.0])


def test_overlong_penalty_rejects_a_buffer_longer_than_the_budget() -> None:
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.ones(1), torch.tensor([5]), max_new_tokens=4, buffer_len=8)


def test_stop_properly_penalty_scales_or_sets_truncated_rewards() -> None:
    rewards, truncated = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([False, True, True])
    assert stop_properly_penalty(rewards, truncated, 0.5).tolist() == [1.0, 1.0, 1.5]
    assert stop_properly_penalty(rewards, truncated, -1.0).tolist() == [1.0, -1.0, -1.0]
    with pytest.raises(ValueError):
        stop_properly_penalty(rewards, truncated, 1.5)


@pytest.mark.parametrize(
    ("scores", "score_range", "kept"),
    [
        ([0.0, 0.0, 0.0], (0.0, 1.0), False),  # all wrong: no signal
        ([1.0, 1.0], (0.0, 1.0), False),  # all right: no signal
        ([0.0, 1.0, 1.0], (0.0, 1.0), True),
        ([0.0, 1.0], (0.0, 0.5), False),  # mean 0.5 on the bound: strict
        ([0.2, 0.4], (0.2, 0.4), True),
    ],
)
def test_dynamic_filtering_keeps_groups_strictly_inside_the_range(
    scores: list[float], score_range: tuple[float, float], kept: bool
) -> None:
    assert keep_group(scores, score_range) is kept
    assert keep_group(torch.tensor(scores), score_range) is kept


def test_normalize_rewards() -> None:
    assert normalize_rewards(torch.tensor([1.0, 3.0]), 2.0, 0.5).tolist() == [-2.0, 2.0]
