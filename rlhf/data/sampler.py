"""A seeded, resumable order over a dataset, and a loader on top of it.

The order of epoch ``e`` is a permutation drawn from ``(seed, e)`` alone, and the state is just ``(epoch,
position)``, so ``load_state_dict(state_dict())`` in a fresh process yields exactly the batches an uninterrupted
run would have seen next (checkpoint resume; OpenRLHF's StatefulDataLoader plays this part). A batch counts as
consumed when it is handed out: save the state after the batch was used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch


class ResumableSampler:
    """Batches of indices over ``range(num_items)``, reshuffled each epoch with ``seed``.

    With ``drop_last`` the tail of an epoch smaller than ``batch_size`` is skipped (every batch is full, as RL
    steps and optimizer steps need); otherwise it comes out as a short batch.
    """

    def __init__(self, num_items: int, batch_size: int, seed: int = 0, shuffle: bool = True, drop_last: bool = True):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if num_items < (batch_size if drop_last else 1):
            raise ValueError(f"{num_items} items cannot fill one batch of {batch_size}; lower the batch size")
        self.num_items, self.batch_size, self.seed = num_items, batch_size, seed
        self.shuffle, self.drop_last = shuffle, drop_last
        self.epoch = 0
        self.position = 0  # index into this epoch's order of the next item to hand out
        self._order: list[int] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.num_items, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_items))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_items, generator=g).tolist()

    def _current_order(self) -> list[int]:
        if self._order is None:
            self._order = self.order(self.epoch)
        return self._order

    def _epoch_done(self) -> bool:
        left = self.num_items - self.position
        return left <= 0 or (self.drop_last and left < self.batch_size)

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.position = 0
        self._order = None

    def next_indices(self) -> list[int]:
        """The next batch, moving into the next epoch when this one is used up."""
        if self._epoch_done():
            self._next_epoch()
        batch = self._current_order()[self.position : self.position + self.batch_size]
        self.position += len(batch)
        return batch

    def __iter__(self) -> Iterator[list[int]]:
        """The rest of the current epoch; afterwards the sampler stands at the start of the next one."""
        while not self._epoch_done():
            yield self.next_indices()
        self._next_epoch()

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_items": self.num_items,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("num_items", "batch_size", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"cannot resume: the checkpoint's data order has {key}={state[key]}, this run has "
                    f"{getattr(self, key)}; resume with the same data and batch settings"
                )
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None


class StatefulLoader:
    """Collated batches from a dataset in :class:`ResumableSampler` order.

    ``batch_size`` is global; with ``world_size > 1`` each rank gets its contiguous share of every global batch
    (all ranks build the same sampler, so they agree without communicating).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        collate_fn: Callable[[list[dict[str, Any]]], Any],
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ):
        if batch_size % world_size:
            raise ValueError(f"batch size {batch_size} is not divisible by {world_size} data-parallel ranks")
        self.dataset, self.collate_fn = dataset, collate_fn
        self.rank, self.world_size = rank, world_size
        self.sampler = ResumableSampler(len(dataset), batch_size, seed, shuffle, drop_last)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def __len__(self) -> int:
        return len(self.sampler)

    def _load(self, indices: Sequence[int]) -> Any:
        share = -(-len(indices) // self.world_size)
        mine = list(indices[self.rank * share : (self.rank + 1) * share])
        rows = self.dataset.rows(mine) if hasattr(self.dataset, "rows") else [self.dataset[i] for i in mine]
        return self.collate_fn(rows)

    def next_batch(self) -> Any:
        """The next batch, rolling over epochs without end (RL prompt streams)."""
        return self._load(self.sampler.next_indices())

    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch (SFT/RM/DPO epochs)."""
        for indices in self.sampler:
            yield self._load(indices)

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)
