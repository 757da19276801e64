"""Several reward functions' outputs -> one reward per sample, as TRL combines them (GRPOTrainer, trl 1.16):

* ``sum_then_normalize`` (TRL's default): the weighted sum over the functions that scored the sample (a declined
  sample, TRL's None, adds nothing for that function); the advantage's baseline then normalises it.
* ``normalize_then_sum`` (GDPO): each function's values z-scored within the prompt's group (mean and unbiased std
  over the samples it scored, std + 1e-4), then the weighted sum.

A sample that every function declined has no reward. TRL leaves it out of its group's mean and std and gives it a
zero advantage; so does the RL loop here: its reward is the mean of the scored samples of its group (0.0 where none
scored; a finite stand-in for what is logged), and ``reward/unscored`` (1.0 for such a sample, written whenever
there is one) is the mask rlhf.pipelines.rl hands the advantage code (``scored``), which leaves the sample out of its
group's mean and std and of the batch's statistics, and zeroes its advantage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import fmean, stdev

from rlhf.rewards.contracts import Scores
from rlhf.rewards.result import RewardResult

#: TRL's epsilon in the per-group std of normalize_then_sum.
GROUP_STD_EPS = 1e-4
UNSCORED_LOG = "reward/unscored"


def _groups(n: int, size: int) -> list[range]:
    size = size if size > 0 and n % size == 0 else 1
    return [range(a, a + size) for a in range(0, n, size)]


def _group_z(values: list[float], size: int) -> list[float]:
    out = [math.nan] * len(values)
    for g in _groups(len(values), size):
        seen = [values[i] for i in g if not math.isnan(values[i])]
        if not seen:
            continue
        mean = fmean(seen)
        std = stdev(seen) if len(seen) > 1 else 0.0
        for i in g:
            if not math.isnan(values[i]):
                out[i] = (values[i] - mean) / (std + GROUP_STD_EPS)
    return out


def _weighted_sum(columns: Sequence[list[float]], weights: Sequence[float], group_size: int) -> list[float]:
    """Per sample, the weighted sum of the values that are not NaN; a sample with none gets its group's mean."""
    out: list[float] = []
    for i in range(len(columns[0])):
        terms = [c[i] * w for c, w in zip(columns, weights, strict=True) if not math.isnan(c[i])]
        out.append(math.fsum(terms) if terms else math.nan)
    for g in _groups(len(out), group_size):
        seen = [out[i] for i in g if not math.isnan(out[i])]
        fill = fmean(seen) if seen else 0.0
        for i in g:
            if math.isnan(out[i]):
                out[i] = fill
    return out


def combine(
    parts: Sequence[Scores],
    names: Sequence[str],
    weights: Sequence[float],
    aggregation: str = "sum_then_normalize",
    group_size: int = 1,
    log_each: bool = False,
) -> RewardResult:
    """One RewardResult from each function's Scores (``names`` label their logs: ``reward/<name>``, written when
    ``log_each`` or there are several)."""
    raw = _weighted_sum([p.values for p in parts], weights, group_size)
    if aggregation == "normalize_then_sum":
        rewards = _weighted_sum([_group_z(p.values, group_size) for p in parts], weights, group_size)
    else:
        rewards = list(raw)
    unscored = [all(math.isnan(p.values[i]) for p in parts) for i in range(len(raw))]
    # The score (reported, filtered and judged at eval) is the weighted sum of the functions' own values, as TRL
    # logs its reward; OpenRLHF's function may return its own.
    single = len(parts) == 1 and parts[0].scores is not None
    scores = list(parts[0].scores) if single else raw
    logs: dict[str, list[float]] = {}
    for p in parts:
        logs.update(p.extra_logs)
    if log_each or len(parts) > 1 or any(unscored):
        if log_each or len(parts) > 1:
            for name, p in zip(names, parts, strict=True):
                logs[f"reward/{name}"] = list(p.values)
        logs[UNSCORED_LOG] = [float(u) for u in unscored]
    return RewardResult(rewards, scores, logs)
