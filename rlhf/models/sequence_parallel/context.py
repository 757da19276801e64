"""The sequence-parallel context of the micro-batch being run: the group, this rank's place in it, and where the
samples of the whole rows sit. Set by :func:`rlhf.models.sequence_parallel.sequence_parallel` around one
micro-batch's forward and backward, read by the Ulysses attention functions in every layer.

The context is process-wide, not per thread: with gradient checkpointing the layers' forwards run again during the
backward, and on GPUs the autograd engine runs the backward on its own device thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rlhf.models.sequence_parallel.layout import SampleLayout


@dataclass(frozen=True)
class SPContext:
    """``group``: the ranks that split each row (size ``size``; this rank is ``rank`` in it); ``layout``: the samples
    of the whole rows (every rank's columns)."""

    group: Any  # torch.distributed.ProcessGroup
    size: int
    rank: int
    layout: SampleLayout


_ACTIVE: list[SPContext] = []


def current() -> SPContext:
    """The active context; RuntimeError when none is (the Ulysses attention ran outside ``sequence_parallel``)."""
    if not _ACTIVE:
        raise RuntimeError(
            "Ulysses attention ran outside rlhf.models.sequence_parallel.sequence_parallel(model, shard, group): "
            "the model's attention was left switched, or a forward/backward ran outside the context"
        )
    return _ACTIVE[-1]


@contextmanager
def activated(ctx: SPContext) -> Iterator[SPContext]:
    """``ctx`` is :func:`current` inside (contexts nest: the innermost wins)."""
    _ACTIVE.append(ctx)
    try:
        yield ctx
    finally:
        for i in range(len(_ACTIVE) - 1, -1, -1):  # this very context (an equal one may be active too)
            if _ACTIVE[i] is ctx:
                del _ACTIVE[i]
                break
