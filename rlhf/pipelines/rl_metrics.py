"""Metrics of rollouts and evaluations, named as OpenRLHF logs them (reference section 8)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean, pstdev, stdev


def rollout_metrics(rewards: Sequence[float], response_lengths: Sequence[float], truncated: Sequence[float]) -> dict:
    """rollout/{reward_mean, reward_std, response_length_mean, truncated_rate, num_samples}."""
    return {
        "rollout/reward_mean": fmean(rewards),
        "rollout/reward_std": pstdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/response_length_mean": fmean(response_lengths),
        "rollout/truncated_rate": fmean(truncated),
        "rollout/num_samples": float(len(rewards)),
    }


def group_reward_std(rewards: Sequence[float], n: int) -> float:
    """OpenRLHF's ``group_reward_std``: the unbiased (n - 1) std of each prompt's n rewards, given to each of its
    samples and averaged over samples, which equals the mean over prompts; 0 when n == 1.

    Pass the rewards after the length penalties (the shaped rewards, before clipping and baselines), as OpenRLHF
    computes it after its overlong penalty."""
    if n <= 1:
        return 0.0
    if len(rewards) % n:
        raise ValueError(f"group_reward_std: {len(rewards)} rewards do not split into groups of {n}")
    groups = [rewards[i : i + n] for i in range(0, len(rewards), n)]
    return fmean(stdev(g) for g in groups)


def eval_metrics(
    rewards: Sequence[float],
    datasources: Sequence[str],
    response_lengths: Sequence[float],
    truncated: Sequence[float],
    n: int,
) -> dict[str, float]:
    """OpenRLHF's compute_eval_metrics: per datasource ds, over prompts of n samples each (contiguous):
    eval_{ds}_pass{n} = mean over prompts of max_j r_j, eval_{ds}_pass1 = mean r (0/1 rewards assumed),
    eval_{ds}_response_length_mean, eval_{ds}_truncated_rate; plus the global length, truncation and count."""
    by_ds: dict[str, list[int]] = defaultdict(list)
    for p in range(0, len(rewards), n):
        by_ds[datasources[p]].append(p)
    out: dict[str, float] = {}
    for ds, starts in sorted(by_ds.items()):
        idx = [i for s in starts for i in range(s, s + n)]
        out[f"eval_{ds}_pass1"] = fmean(rewards[i] for i in idx)
        if n > 1:
            out[f"eval_{ds}_pass{n}"] = fmean(max(rewards[s : s + n]) for s in starts)
        out[f"eval_{ds}_response_length_mean"] = fmean(response_lengths[i] for i in idx)
        out[f"eval_{ds}_truncated_rate"] = fmean(truncated[i] for i in idx)
    out["eval_response_length_mean"] = fmean(response_lengths)
    out["eval_truncated_rate"] = fmean(truncated)
    out["eval_num_samples"] = float(len(rewards))
    return out


def best_metric_key(metrics: dict[str, float], configured: str) -> str | None:
    """auto: the first sorted key ending in _pass1 (OpenRLHF); none: no best checkpoint; else the named key."""
    if configured == "none":
        return None
    if configured != "auto":
        return configured
    keys = sorted(k for k in metrics if k.endswith("_pass1"))
    return keys[0] if keys else None
