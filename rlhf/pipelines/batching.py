"""Cutting a step's rows into per-rank micro-batches, and an eval set into equal per-rank shares.

Every rank must run the same number of forward passes (ZeRO-3 and FSDP2 gather parameters collectively), so an
eval set that does not divide evenly is padded with repeats of its first row; the repeats are dropped from the
results.

Token-budget micro-batches (``trainer.max_tokens_per_micro_batch``, ``trainer.max_tokens_per_forward``; OpenRLHF's
``--train.dynamic_batch_enable``, veRL's ``use_dynamic_bsz``): :func:`token_budget_plan` gives every rank an equal
number of samples holding about the same tokens, then cuts each rank's share into the same number k of micro-batches
of about equal tokens, k the smallest count that keeps every micro-batch within the budget on every rank. The driver
computes the plan of every rank at once, so the ranks agree on k by construction (the engines check it: a mismatch
would hang the collectives); the step-window loss normaliser makes the loss that of the unsplit step whatever k is.

Ranks here are data-parallel ranks (a role group's ``data_parallel``): with sequence parallelism the ranks of one
group share every micro-batch (rlhf.launch.role_calls.RoleCalls.run_per_rank hands it to each of them), and a
micro-batch's token budget is the per-device budget times the group's size (:func:`micro_batch_tokens`: each device
holds its share of the tokens; OpenRLHF's max_tokens_per_gpu x ring_attn_size, veRL's x ulysses size).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Collate = Callable[[list[dict[str, Any]]], dict[str, Any]]


def sequence_size(group: Any) -> int:
    """Ranks per data-parallel rank of a role group (its sequence-parallel size; 1 without a mesh)."""
    return len(group) // group.data_parallel


def micro_batch_tokens(group: Any, per_device: int) -> int:
    """The token budget of one micro-batch on ``group`` for a budget of ``per_device`` tokens per device (0: none)."""
    return per_device * sequence_size(group)


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def per_rank_micro_batches(
    rows: list[dict[str, Any]],
    dp: int,
    micro: int,
    collate: Collate,
    *,
    max_tokens: int = 0,
    row_tokens: Callable[[dict[str, Any]], int] | None = None,
) -> list[list[dict]]:
    """Rank r gets the r-th contiguous share of ``rows`` (as StatefulLoader does), cut into micro-batches of
    ``micro`` rows; with ``max_tokens`` (and ``row_tokens``, a row's token count) the rows are cut by
    :func:`token_budget_plan` instead."""
    if max_tokens and row_tokens is not None:
        plan = token_budget_plan([row_tokens(r) for r in rows], dp, max_tokens)
        return [[collate([rows[i] for i in mb]) for mb in rank] for rank in plan]
    return [[collate([rows[i] for i in mb]) for mb in rank] for rank in count_plan(len(rows), dp, micro)]


def count_plan(n: int, dp: int, micro: int) -> list[list[list[int]]]:
    """rank -> micro-batch -> row indices: contiguous equal shares, cut into micro-batches of ``micro`` rows."""
    if n % (dp * micro):
        raise ValueError(f"{n} rows do not split into {dp} ranks x micro-batches of {micro}")
    share = n // dp
    return [chunks(list(range(r * share, (r + 1) * share)), micro) for r in range(dp)]


def balanced_partition(lengths: Sequence[int], items: Sequence[int], parts: int, equal_size: bool) -> list[list[int]]:
    """``items`` (indices into ``lengths``) in ``parts`` groups of about equal total length: longest first, each
    into the lightest group (with ``equal_size``: the lightest that is not full; ``len(items)`` must divide). Greedy
    LPT: within 4/3 of the best balance, and the exact equal-count split the data-parallel shares need. Every group
    gets at least one item when ``parts <= len(items)``; each group keeps its items in input order."""
    if parts < 1:
        raise ValueError(f"cannot partition into {parts} groups")
    if equal_size and len(items) % parts:
        raise ValueError(f"{len(items)} samples do not split into {parts} equal groups")
    cap = len(items) // parts if equal_size else len(items)
    loads = [0] * parts
    groups: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(items, key=lambda i: -lengths[i]):
        g = min((g for g in range(parts) if len(groups[g]) < cap), key=lambda g: (loads[g], len(groups[g]), g))
        groups[g].append(i)
        loads[g] += lengths[i]
    return [sorted(g) for g in groups]


def min_micro_batches(lengths: Sequence[int], max_tokens: int) -> int:
    """The fewest micro-batches of at most ``max_tokens`` tokens that hold these samples (first-fit decreasing; a
    longer sample takes one of its own)."""
    free: list[int] = []
    for n in sorted(lengths, reverse=True):
        for j, f in enumerate(free):
            if n <= f:
                free[j] -= n
                break
        else:
            free.append(max_tokens - n)
    return len(free)


def token_budget_plan(lengths: Sequence[int], dp: int, max_tokens: int) -> list[list[list[int]]]:
    """rank -> micro-batch -> sample indices for samples of ``lengths`` tokens (see the module docstring): equal
    sample counts per rank, balanced by tokens; the same number of micro-batches on every rank, each within
    ``max_tokens`` (a sample longer than the budget alone in its micro-batch) and balanced by tokens."""
    if max_tokens < 1:
        raise ValueError(f"the token budget must be >= 1, got {max_tokens}")
    shares = balanced_partition(lengths, range(len(lengths)), dp, equal_size=True)
    k = max(min_micro_batches([lengths[i] for i in share], max_tokens) for share in shares)
    limit = min(len(share) for share in shares)
    while True:
        plan = [balanced_partition(lengths, share, k, equal_size=False) for share in shares]
        over = any(len(mb) > 1 and sum(lengths[i] for i in mb) > max_tokens for rank in plan for mb in rank)
        if not over or k >= limit:  # greedy balance can overshoot where first-fit did not: one more micro-batch
            return plan
        k += 1


@dataclass
class EvalShards:
    """An eval set spread over ``dp`` ranks in micro-batches of ``micro`` rows (padded to equal counts)."""

    n: int  # real rows
    per_rank: list[list[list[int]]]  # rank -> micro-batch -> row indices

    @classmethod
    def build(cls, n: int, dp: int, micro: int) -> EvalShards:
        per_rank_batches = max(math.ceil(n / (dp * micro)), 1)
        padded = list(range(n)) + [0] * (per_rank_batches * dp * micro - n)
        share = per_rank_batches * micro
        return cls(n, [chunks(padded[r * share : (r + 1) * share], micro) for r in range(dp)])

    def batches(self, dataset: Any, collate: Collate) -> list[list[dict[str, Any]]]:
        return [[collate(dataset.rows(idx)) for idx in rank] for rank in self.per_rank]

    def gather(self, results: list[list[dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
        """Per-sample outputs of every rank, in row order, padding dropped."""
        flat = [r for rank in results for r in rank]
        keys = flat[0].keys()
        return {k: torch.cat([r[k].reshape(r[k].shape[0], *r[k].shape[1:]) for r in flat])[: self.n] for k in keys}


def redistribute(per_rank: list[list[Any]], ranks: int) -> tuple[list[list[Any]], Callable[[list[list[Any]]], list]]:
    """Spread the micro-batches of ``len(per_rank)`` ranks over ``ranks`` ranks (a role with another size), equal
    counts per rank; returns the new split and a function mapping its results back to the original shape."""
    flat = [b for rank in per_rank for b in rank]
    per = math.ceil(len(flat) / ranks)
    padded = flat + [flat[-1]] * (per * ranks - len(flat))
    split = [padded[r * per : (r + 1) * per] for r in range(ranks)]
    sizes = [len(rank) for rank in per_rank]

    def back(results: list[list[Any]]) -> list[list[Any]]:
        out_flat = [x for rank in results for x in rank][: len(flat)]
        out, i = [], 0
        for s in sizes:
            out.append(out_flat[i : i + s])
            i += s
        return out

    return split, back


def throughput(metrics: dict[str, float], real_tokens: float, seconds: float, prefix: str = "") -> dict[str, float]:
    """``padding_fraction`` (of the tokens the training forwards computed, the share that was padding) and
    ``tokens_per_s`` (real tokens trained per second), from the loss functions' ``tokens_real`` /
    ``tokens_computed`` (rlhf.models.forward.forward_tokens), which are popped from ``metrics``."""
    real, computed = metrics.pop("tokens_real", None), metrics.pop("tokens_computed", None)
    out = {}
    if real is not None and computed:
        out[f"{prefix}padding_fraction"] = 1.0 - real / computed
    if seconds > 0 and real_tokens:
        out[f"{prefix}tokens_per_s"] = real_tokens / seconds
    return out
