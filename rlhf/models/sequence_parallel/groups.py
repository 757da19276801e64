"""The process groups of a data x sequence mesh: contiguous ranks ``[i*sp, (i+1)*sp)`` split each row between them
(an SP group, on one node when ``sp`` divides the GPUs per node); the ranks with the same place in their SP group
form a data-parallel (DP) group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist


@dataclass(frozen=True)
class SPGroups:
    sp: int
    dp: int
    sp_rank: int
    dp_rank: int
    sp_group: Any
    dp_group: Any


def sp_groups(sp: int) -> SPGroups:
    """This rank's SP and DP groups (collective: every rank calls it with the same ``sp``; ``dist`` initialised)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if sp < 1 or world % sp:
        raise ValueError(f"sequence-parallel size {sp} does not divide the world size {world}")
    sp_group = dp_group = None
    for i in range(world // sp):  # every rank creates every group, in the same order (new_group is collective)
        g = dist.new_group(list(range(i * sp, (i + 1) * sp)))
        sp_group = g if rank // sp == i else sp_group
    for j in range(sp):
        g = dist.new_group(list(range(j, world, sp)))
        dp_group = g if rank % sp == j else dp_group
    return SPGroups(sp, world // sp, rank % sp, rank // sp, sp_group, dp_group)
