"""The Ulysses attention of several ranks in one process, for tests and device checks: each rank a thread, the
all-to-all an in-process exchange (rank r's received block p is the block rank p sent to r), and the reference it
must equal, attention within each sample of the whole rows. Autograd runs across the threads' outputs as one graph,
so gradients can be compared too. Nothing here is a collective: what it checks is the reshapes around the exchange
and the kernels, not ``all_to_all_single``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf.models.sequence_parallel.attention import sdpa_kernel, ulysses
from rlhf.models.sequence_parallel.comm import Exchange
from rlhf.models.sequence_parallel.layout import SampleLayout


class ThreadRanks:
    """``size`` ranks as threads; :meth:`run` calls ``fn(rank, exchange)`` on each and returns the results in rank
    order (the first exception re-raised; a rank that fails breaks the others' waits instead of hanging them)."""

    def __init__(self, size: int, timeout_s: float = 60.0) -> None:
        self.size = size
        self.slots: list[Tensor | None] = [None] * size
        self.barrier = threading.Barrier(size, timeout=timeout_s)

    def exchange(self, rank: int) -> Exchange:
        def swap(blocks: Tensor) -> Tensor:
            self.slots[rank] = blocks
            self.barrier.wait()
            got = torch.stack([self.slots[p][rank] for p in range(self.size)])
            self.barrier.wait()  # no rank refills its slot before every rank has read it
            return got

        return swap

    def run(self, fn: Callable[[int, Exchange], Any]) -> list[Any]:
        results: list[Any] = [None] * self.size
        errors: list[BaseException] = []

        def work(rank: int) -> None:
            try:
                results[rank] = fn(rank, self.exchange(rank))
            except BaseException as e:  # re-raised in the caller's thread
                errors.append(e)
                self.barrier.abort()

        threads = [threading.Thread(target=work, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


def simulated_attention(q: Tensor, k: Tensor, v: Tensor, layout: SampleLayout, size: int, kernel=sdpa_kernel) -> Tensor:
    """Whole rows ``q [B, H, S, D]``, ``k, v [B, K, S, D]`` split over ``size`` simulated ranks, each running
    :func:`~rlhf.models.sequence_parallel.attention.ulysses` on its columns; their outputs side by side."""
    per = q.shape[2] // size

    def rank(r: int, exchange: Exchange) -> Tensor:
        cols = slice(r * per, (r + 1) * per)
        return ulysses(
            q[:, :, cols], k[:, :, cols], v[:, :, cols], size=size, exchange=exchange, layout=layout, kernel=kernel
        )

    return torch.cat(ThreadRanks(size).run(rank), dim=2)


def reference_attention(q: Tensor, k: Tensor, v: Tensor, layout: SampleLayout) -> Tensor:
    """Causal attention within each sample of the whole rows, one sample at a time (kv heads repeated for GQA)."""
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    out = torch.empty_like(q)
    for row, s, e in layout.spans:
        out[row, :, s:e] = F.scaled_dot_product_attention(
            q[row : row + 1, :, s:e], k[row : row + 1, :, s:e], v[row : row + 1, :, s:e], is_causal=True
        )[0]
    return out
