"""The collectives of sequence parallelism, over public ``torch.distributed`` calls (gloo on CPU, nccl on GPUs).

* :func:`seq_to_heads` / :func:`heads_to_seq`: Ulysses' all-to-all. Before attention each rank holds every head of
  its own columns; after :func:`seq_to_heads` it holds ``1/P`` of the heads over the whole rows, and
  :func:`heads_to_seq` undoes it. The exchange is one ``all_to_all_single`` along a leading dimension of size P
  inside an autograd function whose backward is the same exchange (an all-to-all is its own adjoint), so gradients
  flow back to each rank's own columns.
* :func:`gather_columns`: every rank's columns of a per-token output, in order (not differentiable: outputs only);
  :func:`gather_columns_for_loss`: the same, differentiable, for a loss every rank of the group computes whole on the
  gathered outputs (its backward hands each rank the gradient of its own columns).

The reshapes around the exchange are separate functions of an ``exchange`` callable so that a one-process test can
stand in for the collective (rank r's received block p is rank p's sent block r).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

Exchange = Callable[[Tensor], Tensor]  # [P, ...] -> [P, ...]: block p goes to rank p, block p comes from rank p


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` along dim 0 (of size P); backward: the same exchange of the gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, group) -> Tensor:
        ctx.group = group
        x = x.contiguous()
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return _AllToAll.apply(grad, ctx.group), None


def all_to_all(group) -> Exchange:
    """The exchange over ``group`` (differentiable)."""
    return lambda x: _AllToAll.apply(x, group)


def seq_to_heads(x: Tensor, size: int, exchange: Exchange) -> Tensor:
    """``[B, h, S/P, D]`` (all heads, my columns) -> ``[B, h/P, S, D]`` (my heads, every column)."""
    b, h, s_local, d = x.shape
    blocks = x.reshape(b, size, h // size, s_local, d).transpose(0, 1)  # [P, B, h/P, S/P, D]: block p for rank p
    got = exchange(blocks.contiguous())  # block p: rank p's columns of my heads
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // size, size * s_local, d)


def heads_to_seq(x: Tensor, size: int, exchange: Exchange) -> Tensor:
    """``[B, h/P, S, D]`` (my heads, every column) -> ``[B, h, S/P, D]`` (all heads, my columns)."""
    b, h_local, s, d = x.shape
    blocks = x.reshape(b, h_local, size, s // size, d).permute(2, 0, 1, 3, 4)  # block p: rank p's columns
    got = exchange(blocks.contiguous())  # block p: rank p's heads of my columns
    return got.transpose(0, 1).reshape(b, size * h_local, s // size, d)


@torch.no_grad()
def gather_columns(local: Tensor, group) -> Tensor:
    """``[R, L, ...]`` on each rank -> ``[R, P*L, ...]``: the ranks' columns side by side, rank order."""
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, local.contiguous(), group=group)
    return torch.cat(parts, dim=1)


class _GatherColumns(torch.autograd.Function):
    """:func:`gather_columns` whose backward keeps this rank's columns of the gradient (no communication)."""

    @staticmethod
    def forward(ctx, local: Tensor, group) -> Tensor:
        ctx.rank, ctx.width = dist.get_rank(group), local.shape[1]
        return gather_columns(local, group)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        start = ctx.rank * ctx.width
        return grad[:, start : start + ctx.width], None


def gather_columns_for_loss(local: Tensor, group) -> Tensor:
    """``[R, L, ...]`` on each rank -> ``[R, P*L, ...]``, differentiable. Every rank of the group must compute the same
    loss from the result (the same function of the same gathered values): then each rank's backward carries exactly
    its own columns' part of that loss's gradient, and the ranks' parameter gradients **sum** to the gradient of the
    unsplit forward (what rlhf.models.sequence_parallel.loss_scale makes an engine's reduction give). This is how any
    loss stays exact, whatever it does across a sequence (sequence-level ratios, pair margins, a reward at the last
    token), where shares of a token sum would need each loss rewritten."""
    return _GatherColumns.apply(local, group)
