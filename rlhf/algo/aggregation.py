"""Loss aggregation: how a per-token loss ``L[B, T]`` becomes the scalar one micro-batch backpropagates.

OpenRLHF (``aggregate_loss`` in ``openrlhf/models/loss.py``, step-window helpers in ``openrlhf/utils/loss_utils.py``)
normalises by the token (or sequence) count of the *whole optimizer step*, summed over every micro-batch and every
data-parallel rank, instead of averaging per-micro-batch means (which weights tokens unevenly when micro-batches hold
different token counts). :func:`step_loss_normalizer` computes those step-window counts; the aggregations consume them.

Scaling convention (OpenRLHF's, verl-style): the engine scales every micro-batch loss by ``1 / grad_accum_steps``
(DeepSpeed does) and averages gradients over ``dp_size`` ranks. The counts are therefore divided by
``grad_accum_steps`` and the aggregations multiply by ``dp_size``, so that after both the gradient is that of exactly
one token mean over the whole step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.logprobs import masked_mean, masked_sum
from rlhf.algo.registry import Registry

#: Sums a tensor over data-parallel ranks. May reduce in place and return ``None`` (``torch.distributed.all_reduce``
#: can be passed as is) or return the reduced tensor.
AllReduce = Callable[[Tensor], Tensor | None]

# Added to each sequence's token count in ``seq_mean`` (OpenRLHF's value), so an empty sequence gives 0, not NaN.
SEQ_EPS = 1e-8


def all_reduce_sum(tensor: Tensor, all_reduce: AllReduce | None) -> Tensor:
    """``tensor`` summed over data-parallel ranks by ``all_reduce``; unchanged when there is none (one process)."""
    if all_reduce is None:
        return tensor
    reduced = all_reduce(tensor)
    return tensor if reduced is None else reduced


@dataclass(frozen=True)
class LossNormalizer:
    """Denominators shared by every micro-batch of one optimizer step (OpenRLHF ``get_loss_batch_info``).

    Attributes:
        batch_num_tokens: loss tokens in the step, all ranks and micro-batches, divided by grad-accum steps.
        global_batch_size: non-empty sequences in the step, same convention.
        dp_size: data-parallel world size (cancels the engine's gradient averaging over ranks).
        constant: fixed normaliser for ``seq_mean_token_sum_norm`` (Dr. GRPO), e.g. the max response length.
        grad_accum_steps: micro-batches per optimizer step on a rank (``token_sum`` undoes the engine's division).

    Any of the counts may be ``None``: aggregations then fall back to the current micro-batch alone (plain mean).
    """

    batch_num_tokens: float | Tensor | None = None
    global_batch_size: float | Tensor | None = None
    dp_size: int = 1
    constant: float | None = None
    grad_accum_steps: int = 1


def step_loss_normalizer(
    masks: Sequence[Tensor],
    *,
    dp_size: int = 1,
    grad_accum_steps: int | None = None,
    all_reduce: AllReduce | None = None,
    constant: float | None = None,
) -> LossNormalizer:
    """Normalisers for one optimizer step from the loss masks of its micro-batches on this rank.

    ``batch_num_tokens = all_reduce(Σ_mb Σ m) / gas``, ``global_batch_size = all_reduce(Σ_mb #{i: Σ_t m_i > 0}) / gas``
    (OpenRLHF ``_optimizer_step_loss_norm`` behind ``iter_grad_accum_global_norm``), both summed in one collective.

    Args:
        masks: the ``[B, T]`` loss masks of the step's micro-batches on this rank.
        dp_size: data-parallel world size.
        grad_accum_steps: the factor the engine divides each micro-batch loss by; defaults to ``len(masks)``. Pass the
            configured value for a trailing, shorter window (OpenRLHF divides by the configured gas there too).
        all_reduce: sums over data-parallel ranks; ``None`` in a single process.
        constant: carried into the result for ``seq_mean_token_sum_norm``.
    """
    if not masks:
        raise ValueError("an optimizer step needs at least one micro-batch")
    gas = len(masks) if grad_accum_steps is None else grad_accum_steps
    if gas < 1:
        raise ValueError(f"grad_accum_steps must be >= 1, got {gas}")
    counts = torch.zeros(2, dtype=torch.float32, device=masks[0].device)  # [tokens, non-empty sequences]
    for mask in masks:
        mask = mask.to(device=counts.device, dtype=torch.float32)
        counts[0] += mask.sum()
        counts[1] += (mask.reshape(mask.shape[0], -1).sum(dim=-1) > 0).sum()
    counts = all_reduce_sum(counts, all_reduce)
    return LossNormalizer(
        batch_num_tokens=counts[0] / gas,
        global_batch_size=counts[1] / gas,
        dp_size=dp_size,
        constant=constant,
        grad_accum_steps=gas,
    )


Aggregation = Callable[[Tensor, Tensor, LossNormalizer | None], Tensor]

LOSS_AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


def _sequences_denominator(mask: Tensor, norm: LossNormalizer | None) -> tuple[Tensor | float, int]:
    # (number of sequences to divide by, dp_size): the step-window count, else this micro-batch's non-empty ones.
    if norm is None or norm.global_batch_size is None:
        return (mask.sum(dim=-1) > 0).sum(), 1
    return norm.global_batch_size, norm.dp_size


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(loss: Tensor, mask: Tensor, norm: LossNormalizer | None = None) -> Tensor:
    """One token mean over the optimizer step: ``Σ L·m / batch_num_tokens · dp_size`` (OpenRLHF's default,
    ``aggregate_loss(token_level_loss=True)``); ``Σ L·m / Σ m`` over this micro-batch when no count is given."""
    if norm is None or norm.batch_num_tokens is None:
        return masked_mean(loss, mask)
    return masked_sum(loss, mask) / norm.batch_num_tokens * norm.dp_size


@LOSS_AGGREGATIONS.register("seq_mean")
def seq_mean(loss: Tensor, mask: Tensor, norm: LossNormalizer | None = None) -> Tensor:
    """Mean over sequences of each sequence's token mean (GSPO's; OpenRLHF ``aggregate_loss(token_level_loss=False)``):

    ``Σ_i [Σ_t L·m / (Σ_t m + 1e-8)] · 1[Σ_t m > 0] / global_batch_size · dp_size``; empty sequences are excluded.
    """
    tokens = mask.sum(dim=-1)
    per_sequence = masked_sum(loss, mask, dim=-1) / (tokens + SEQ_EPS)
    denominator, dp_size = _sequences_denominator(mask, norm)
    return (per_sequence * (tokens > 0)).sum() / denominator * dp_size


@LOSS_AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(loss: Tensor, mask: Tensor, norm: LossNormalizer | None = None) -> Tensor:
    """Mean over sequences of each sequence's token *sum*: ``Σ_i Σ_t L·m / global_batch_size · dp_size``
    (verl's ``seq-mean-token-sum``; not in OpenRLHF). Long sequences weigh more, per token, than in ``seq_mean``."""
    denominator, dp_size = _sequences_denominator(mask, norm)
    return masked_sum(loss, mask) / denominator * dp_size


@LOSS_AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, norm: LossNormalizer | None = None) -> Tensor:
    """Dr. GRPO (arXiv 2503.20783): token sums divided by a *constant* instead of each sequence's length, removing
    GRPO's length bias: ``Σ_i Σ_t L·m / C / global_batch_size · dp_size`` with ``C = norm.constant`` (e.g. the
    maximum response length). Not in OpenRLHF; verl's ``seq-mean-token-sum-norm``."""
    if norm is None or norm.constant is None:
        raise ValueError("seq_mean_token_sum_norm needs LossNormalizer.constant (e.g. the max response length)")
    return seq_mean_token_sum(loss, mask, norm) / norm.constant


@LOSS_AGGREGATIONS.register("token_sum")
def token_sum(loss: Tensor, mask: Tensor, norm: LossNormalizer | None = None) -> Tensor:
    """The sum over every loss token of the optimizer step, all ranks: ``Σ L·m · dp_size · grad_accum_steps`` (veRL's
    ``token-sum``; not in OpenRLHF). The factors undo the engine's division by the accumulation steps and its mean
    over ranks; the gradient grows with the batch, so the learning rate is tied to the token count."""
    if norm is None:
        return masked_sum(loss, mask)
    return masked_sum(loss, mask) * norm.dp_size * norm.grad_accum_steps


def response_width(mask: Tensor) -> int:
    """The longest response of a micro-batch, in tokens: the span from each row's first to its last loss token
    (every token of a single-turn response), at least 1. veRL 0.9.1 pads each micro-batch to this width and, without
    ``loss_scale_factor``, divides ``seq-mean-token-sum-norm`` by it; our rows also hold the prompt, so the tensor's
    own width would not do."""
    flat = mask.reshape(-1, mask.shape[-1]) > 0
    if not flat.any():
        return 1
    columns = torch.arange(flat.shape[-1], device=flat.device)
    first = torch.where(flat, columns, flat.shape[-1]).min(dim=-1).values
    last = torch.where(flat, columns, -1).max(dim=-1).values
    return max(int((last - first + 1).max()), 1)


# OpenRLHF's --actor.loss_agg_mode names (0.11.2) are the same functions under its names.
for _alias, _name in (("token-mean", "token_mean"), ("seq-mean-token-mean", "seq_mean")):
    LOSS_AGGREGATIONS.add(_alias, LOSS_AGGREGATIONS.get(_name))


def aggregate(loss: Tensor, mask: Tensor, name: str = "token_mean", norm: LossNormalizer | None = None) -> Tensor:
    """Aggregate a per-token loss with the registered aggregation ``name`` (ours or OpenRLHF's ``loss_agg_mode``)."""
    return LOSS_AGGREGATIONS.get(name)(loss, mask, norm)
