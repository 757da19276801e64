"""Cutting a step's rows into per-rank micro-batches, and an eval set into equal per-rank shares.

Every rank must run the same number of forward passes (ZeRO-3 gathers parameters collectively), so an eval set
that does not divide evenly is padded with repeats of its first row; the repeats are dropped from the results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Collate = Callable[[list[dict[str, Any]]], dict[str, Any]]


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def per_rank_micro_batches(rows: list[dict[str, Any]], dp: int, micro: int, collate: Collate) -> list[list[dict]]:
    """Rank r gets the r-th contiguous share of ``rows`` (as StatefulLoader does), cut into micro-batches."""
    if len(rows) % (dp * micro):
        raise ValueError(f"{len(rows)} rows do not split into {dp} ranks x micro-batches of {micro}")
    share = len(rows) // dp
    return [[collate(mb) for mb in chunks(rows[r * share : (r + 1) * share], micro)] for r in range(dp)]


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
