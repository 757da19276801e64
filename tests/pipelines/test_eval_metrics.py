"""Eval pass@1 and its standard error with the samples of a prompt as one cluster (rlhf.pipelines.rl_metrics)."""

from __future__ import annotations

import math
import random
from statistics import fmean, pstdev

import pytest

from rlhf.pipelines.rl_metrics import clustered_se, eval_metrics, mean_se


def _metrics(scores: list[float], tasks: list[str], n: int) -> dict[str, float]:
    return eval_metrics(scores, tasks, [1.0] * len(scores), [0.0] * len(scores), n)


def test_clustered_se_is_the_std_of_the_prompt_means_over_root_m():
    # prompt means 1, 0.5, 0: their unbiased variance is 0.25, so SE = sqrt(0.25 / 3)
    assert clustered_se([1.0, 0.5, 0.0]) == pytest.approx(math.sqrt(0.25 / 3))
    # one sample per prompt: the binomial SE with the unbiased (m - 1) variance
    assert clustered_se([1.0, 0.0, 0.0, 1.0]) == pytest.approx(math.sqrt(4 / 3 * 0.25 / 4))


def test_repeating_a_prompts_samples_does_not_shrink_the_error():
    # Each prompt always right or always wrong: 4 samples per prompt tell nothing more than 1, and the clustered SE
    # stays that of 6 prompts where the naive binomial one over 24 samples would be half as large.
    one = _metrics([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], ["add"] * 6, 1)
    four = _metrics([s for s in [1.0, 1.0, 0.0, 1.0, 0.0, 0.0] for _ in range(4)], ["add"] * 24, 4)
    assert four["eval_add_pass1"] == one["eval_add_pass1"] == 0.5
    assert four["eval_add_pass1_se"] == pytest.approx(one["eval_add_pass1_se"])
    assert four["eval_add_pass1_se"] == pytest.approx(math.sqrt(0.3 / 6))  # prompt means' variance 6 * 0.25 / 5
    assert four["eval_add_pass1_se"] > 2 * math.sqrt(0.25 / 24)


def test_clustered_se_matches_the_spread_of_repeated_evals():
    # Prompts drawn from a task whose prompts differ in difficulty, 4 samples each: over many simulated evals, the
    # mean clustered SE is the actual std of pass@1 (within 10%), which the binomial formula understates.
    rng = random.Random(0)
    difficulty = [0.0, 0.05, 0.3, 0.6, 0.9, 1.0, 1.0, 1.0]
    m, n, evals = 50, 4, 400  # seeded; 400 evals pin the std to about 4%
    pass1, ses, naive = [], [], []
    for _ in range(evals):
        ps = [rng.choice(difficulty) for _ in range(m)]
        scores = [float(rng.random() < p) for p in ps for _ in range(n)]
        out = _metrics(scores, ["t"] * (m * n), n)
        pass1.append(out["eval_t_pass1"])
        ses.append(out["eval_t_pass1_se"])
        naive.append(math.sqrt(out["eval_t_pass1"] * (1 - out["eval_t_pass1"]) / (m * n)))
    assert fmean(ses) == pytest.approx(pstdev(pass1), rel=0.1)
    assert fmean(naive) < 0.75 * pstdev(pass1)


def test_each_task_gets_its_se_and_the_mean_gets_the_root_sum_of_squares():
    scores = [1.0, 1.0, 0.0, 0.0] + [1.0, 0.0, 1.0, 1.0] + [1.0, 1.0, 1.0, 1.0]  # 2 samples per prompt
    tasks = ["add"] * 4 + ["copy"] * 4 + ["next"] * 4
    out = _metrics(scores, tasks, 2)
    assert out["eval_add_pass1"] == 0.5 and out["eval_add_pass1_se"] == pytest.approx(0.5)  # prompt means 1, 0
    assert out["eval_copy_pass1"] == 0.75 and out["eval_copy_pass1_se"] == pytest.approx(0.25)  # 0.5, 1
    assert out["eval_next_pass1_se"] == 0.0
    assert out["eval_pass1_mean"] == pytest.approx((0.5 + 0.75 + 1.0) / 3)
    assert out["eval_pass1_mean_se"] == pytest.approx(math.sqrt(0.5**2 + 0.25**2) / 3)
    assert out["eval_pass1_mean_se"] == pytest.approx(mean_se([0.5, 0.25, 0.0]))


def test_a_task_with_one_prompt_has_no_se_and_a_single_task_no_mean():
    out = _metrics([1.0, 0.0, 1.0, 1.0, 1.0, 1.0], ["add", "add", "copy", "copy", "copy", "copy"], 2)
    assert "eval_add_pass1_se" not in out and "eval_pass1_mean_se" not in out
    assert out["eval_copy_pass1_se"] == 0.0 and "eval_pass1_mean" in out
    single = _metrics([1.0, 0.0, 1.0, 1.0], ["add"] * 4, 2)
    assert "eval_pass1_mean" not in single and single["eval_add_pass1_se"] == pytest.approx(0.25)


def test_clustered_se_needs_two_prompts():
    with pytest.raises(ValueError, match="at least 2"):
        clustered_se([0.5])


def test_the_console_line_shows_each_pass1_with_its_se_and_drops_lengths():
    from rlhf.pipelines.lifecycle import _headline_evals

    out = _metrics([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0], ["add"] * 4 + ["copy"] * 4, 2)
    line = _headline_evals({f"eval/{k}": v for k, v in out.items()} | {"train/reward": 0.5})
    assert line == {
        "eval_add_pass1": "0.500±0.500",
        "eval_add_pass2": "0.5",
        "eval_copy_pass1": "0.750±0.250",
        "eval_copy_pass2": "1",
        "eval_pass1_mean": "0.625±0.280",
    }
