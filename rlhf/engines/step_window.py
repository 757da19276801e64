"""What every training backend's optimizer step shares around its own backward and update: the micro-batch count
check, the batches on the device, the step-window loss normaliser (rlhf.algo.step_loss_normalizer: one token mean
over all micro-batches of all ranks, as OpenRLHF) and the metrics averaged over micro-batches and ranks."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from rlhf.algo import LossNormalizer, step_loss_normalizer
from rlhf.engines.distributed import mean_over_ranks, to_device, world_size


def step_inputs(
    micro_batches: list[dict[str, Any]],
    grad_accum: int,
    device: torch.device,
    mask_key: str | None,
    norm_constant: float | None,
) -> tuple[list[dict[str, Any]], LossNormalizer | None]:
    """The micro-batches on ``device`` and the step-window normaliser of ``micro_batch[mask_key]`` (None when
    ``mask_key`` is None: sequence-level losses). Collective: the token counts are summed over the ranks."""
    if len(micro_batches) != grad_accum:
        raise ValueError(
            f"an optimizer step takes {grad_accum} micro-batches per rank (gradient accumulation derived "
            f"from trainer.global_batch), got {len(micro_batches)}"
        )
    batches = [to_device(mb, device) for mb in micro_batches]
    if mask_key is None:
        return batches, None
    ranks = world_size()
    norm = step_loss_normalizer(
        [b[mask_key] for b in batches],
        dp_size=ranks,
        grad_accum_steps=grad_accum,
        all_reduce=dist.all_reduce if ranks > 1 else None,
        constant=norm_constant,
    )
    return batches, norm


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
