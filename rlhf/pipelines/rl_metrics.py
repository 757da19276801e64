"""Metrics of rollouts and evaluations, named as OpenRLHF logs them (reference section 8)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from math import sqrt
from statistics import fmean, pstdev, stdev

#: A step's metric names logged as they are: the rollout's, the SFT warm-up's and veRL's actor names
#: (logging.verl_metrics); every other one gets ``train/``.
OWN_PREFIXES = ("rollout/", "sft/", "actor/")


def logged_names(metrics: dict) -> dict:
    """A step's metrics under the names they are logged with: ``train/`` before each name but those of
    :data:`OWN_PREFIXES`."""
    return {(k if k.startswith(OWN_PREFIXES) else f"train/{k}"): v for k, v in metrics.items()}


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


def clustered_se(cluster_means: Sequence[float]) -> float:
    """The standard error of a mean over m equal-sized clusters (here the n samples of one prompt), from the
    clusters' own means c_i: sqrt(sum_i (c_i - c)^2 / (m (m - 1))), c their mean.

    Samples of one prompt are correlated (the model knows that prompt or not), so the n*m samples are not n*m
    independent trials: the binomial sqrt(p(1-p)/(n*m)) understates the error. The clusters are independent when
    the prompts are independent draws from the task (the builtin eval sets are), which is all this needs: it is the
    cluster-robust (Liang-Zeger) variance of the mean with the m/(m-1) small-sample factor, i.e. the sample variance
    of the prompt means over m, as in Miller, "Adding Error Bars to Evals" (2024), section 2 with resampled answers.
    Needs m >= 2."""
    m = len(cluster_means)
    if m < 2:
        raise ValueError(f"clustered_se needs at least 2 clusters, got {m}")
    return stdev(cluster_means) / sqrt(m)


def mean_se(ses: Sequence[float]) -> float:
    """The standard error of the unweighted mean of T independent estimates from their standard errors:
    sqrt(sum_t se_t^2) / T (the tasks' prompts and samples are disjoint, so their errors are independent)."""
    return sqrt(sum(se * se for se in ses)) / len(ses)


def eval_metrics(
    rewards: Sequence[float],
    datasources: Sequence[str],
    response_lengths: Sequence[float],
    truncated: Sequence[float],
    n: int,
) -> dict[str, float]:
    """OpenRLHF's compute_eval_metrics: per datasource ds, over prompts of n samples each (contiguous):
    eval_{ds}_pass{n} = mean over prompts of max_j r_j, eval_{ds}_pass1 = mean r (0/1 rewards assumed),
    eval_{ds}_response_length_mean, eval_{ds}_truncated_rate; plus the global length, truncation and count.

    Beside OpenRLHF's: eval_{ds}_pass1_se, the standard error of eval_{ds}_pass1 with the samples clustered by
    prompt (:func:`clustered_se`; only where ds has 2 prompts or more), and, with 2 datasources or more,
    eval_pass1_mean / eval_pass1_mean_se: the unweighted mean of their pass@1 and its standard error
    (:func:`mean_se`; only when every datasource has one). None ends in _pass1, so best_metric=auto and a sweep's
    default objective still pick a datasource's pass@1."""
    by_ds: dict[str, list[int]] = defaultdict(list)
    for p in range(0, len(rewards), n):
        by_ds[datasources[p]].append(p)
    out: dict[str, float] = {}
    pass1, ses = [], []
    for ds, starts in sorted(by_ds.items()):
        idx = [i for s in starts for i in range(s, s + n)]
        out[f"eval_{ds}_pass1"] = fmean(rewards[i] for i in idx)
        pass1.append(out[f"eval_{ds}_pass1"])
        if len(starts) > 1:
            out[f"eval_{ds}_pass1_se"] = clustered_se([fmean(rewards[s : s + n]) for s in starts])
            ses.append(out[f"eval_{ds}_pass1_se"])
        if n > 1:
            out[f"eval_{ds}_pass{n}"] = fmean(max(rewards[s : s + n]) for s in starts)
        out[f"eval_{ds}_response_length_mean"] = fmean(response_lengths[i] for i in idx)
        out[f"eval_{ds}_truncated_rate"] = fmean(truncated[i] for i in idx)
    if len(pass1) > 1:
        out["eval_pass1_mean"] = fmean(pass1)
        if len(ses) == len(pass1):
            out["eval_pass1_mean_se"] = mean_se(ses)
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
