"""What every training backend's optimizer step shares around its own backward and update: the micro-batch count
check, the batches on the device, the step-window loss normaliser (rlhf.algo.step_loss_normalizer: one token mean
over all micro-batches of all ranks, as OpenRLHF) and the metrics averaged over micro-batches and ranks.

A step takes any number of micro-batches, the same on every rank: ``trainer.global_batch`` / (micro-batch x ranks)
of them when micro-batches hold a fixed number of samples, whatever the token budget gives otherwise
(``trainer.max_tokens_per_micro_batch``). The engine divides each micro-batch's loss by that count and the
normaliser is built with it, so the gradient is that of the whole step's loss however the samples were cut.

Sequence parallelism (``groups``: rlhf.models.sequence_parallel.SPGroups, SP size > 1): the ranks of an SP group hold
the same micro-batches, so the normaliser counts over the data-parallel ranks only, and each rank's loss is
multiplied by :func:`sp_loss_scale` before the engine's backward: an engine averages gradients over every rank,
and the ranks of a group each carry their own columns' part of the gradient, which must be summed.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from rlhf.algo import LossNormalizer, step_loss_normalizer
from rlhf.backends.shared.distributed import mean_over_ranks, to_device, world_size


def check_micro_batch_count(count: int, device: torch.device) -> None:
    """Every rank must run the same number of micro-batches (each forward/backward holds collectives under ZeRO-3
    and FSDP2, and the gradient reduction waits for every rank): one MAX all-reduce of (count, -count), so that a
    mismatch raises on every rank instead of hanging. Collective."""
    if count < 1:
        raise ValueError("an optimizer step needs at least one micro-batch")
    if world_size() == 1:
        return
    both = torch.tensor([count, -count], dtype=torch.long, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    most, fewest = int(both[0]), -int(both[1])
    if most != fewest:
        raise ValueError(
            f"the ranks were given different numbers of micro-batches for one optimizer step ({fewest} to {most}; "
            f"this rank {count}): every rank must run the same number (rlhf.pipelines.batching plans them)"
        )


def step_inputs(
    micro_batches: list[dict[str, Any]],
    device: torch.device,
    mask_key: str | None,
    norm_constant: float | None,
    groups: Any = None,
) -> tuple[list[dict[str, Any]], LossNormalizer | None]:
    """The micro-batches on ``device`` and the step-window normaliser of ``micro_batch[mask_key]`` (None when
    ``mask_key`` is None: sequence-level losses). Collective: the micro-batch count is checked across the ranks and
    the token counts are summed over the data-parallel ranks (every rank without sequence parallelism; ``groups``:
    the DP group of this rank's SP group)."""
    check_micro_batch_count(len(micro_batches), device)
    batches = [to_device(mb, device) for mb in micro_batches]
    if mask_key is None:
        return batches, None
    if groups is None:
        ranks, reduce = world_size(), dist.all_reduce
    else:
        ranks, reduce = groups.dp, partial(dist.all_reduce, group=groups.dp_group)
    norm = step_loss_normalizer(
        [b[mask_key] for b in batches],
        dp_size=ranks,
        grad_accum_steps=len(batches),
        all_reduce=reduce if ranks > 1 else None,
        constant=norm_constant,
    )
    return batches, norm


def sp_loss_scale(groups: Any) -> int:
    """What each rank's loss is multiplied by before a backward whose gradients the engine averages over every rank
    (DeepSpeed without an mpu, FSDP2 over the whole world): the SP size, so that the average is the sum over each SP
    group averaged over the DP groups (rlhf.models.sequence_parallel.loss_scale); 1 without sequence parallelism."""
    if groups is None:
        return 1
    from rlhf.models.sequence_parallel import loss_scale

    return loss_scale(groups.sp, "world")


class MetricSums:
    """The loss function's metrics summed over a step's micro-batches, then averaged over them and the ranks."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0

    def add(self, metrics: dict[str, Any]) -> None:
        for k, v in metrics.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
        self.count += 1

    def mean(self, device: torch.device) -> dict[str, float]:
        """Collective (one all-reduce)."""
        return mean_over_ranks({k: v / max(self.count, 1) for k, v in self.sums.items()}, device)
