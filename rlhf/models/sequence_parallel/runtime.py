"""How an engine turns sequence parallelism on for the forwards it runs: :func:`splitting` around one micro-batch's
forward **and backward** (or a forward without gradients); inside, the model forwards of rlhf.models.forward split
their rows over the SP group by themselves (:func:`active` says how), so the loss functions and the pipelines that
call them stay as they are.

What a forward does inside (rlhf.models.forward): pack the micro-batch into one row, take this rank's columns
(:func:`rlhf.models.sequence_parallel.shard_packed`), :meth:`Splitting.enter` the model's Ulysses context for that
shard (kept open until the scope ends, so that the backward, gradient checkpointing's recomputation included, runs
inside it too), run the model on the columns, and gather the per-token outputs back over the group with a
differentiable gather: every rank of the group then holds the whole micro-batch's log-probs (values, entropy) and
computes the same loss on them as the unsplit run would, and each rank's backward carries its own columns' part of
the gradient. The engine sums those over the SP group and averages over the DP group
(:func:`rlhf.models.sequence_parallel.loss_scale`).

Outside :func:`splitting`, or with an SP size of 1, nothing changes: the forwards run as without sequence
parallelism. The scope is process-wide (one engine computes at a time in a rank's process), not per thread: on GPUs
autograd runs the backward on threads of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rlhf.models.sequence_parallel.batch import SequenceShard
from rlhf.models.sequence_parallel.groups import SPGroups
from rlhf.models.sequence_parallel.switch import sequence_parallel


@dataclass
class Splitting:
    """One micro-batch's sequence-parallel scope: the groups, and the model contexts its forwards entered."""

    groups: SPGroups
    stack: ExitStack = field(default_factory=ExitStack)
    forwards: int = 0

    @property
    def size(self) -> int:
        return self.groups.sp

    @property
    def rank(self) -> int:
        return self.groups.sp_rank

    @property
    def group(self) -> Any:
        return self.groups.sp_group

    def enter(self, model: Any, shard: SequenceShard) -> None:
        """``model`` runs ``shard``'s columns from here to the end of the scope (its backward included). A second
        forward in the same scope stacks its context on the first: both backwards are right, but gradient
        checkpointing would recompute the first forward's layers in the second's layout, so a model that
        checkpoints is refused a second forward with gradients."""
        import torch

        if self.forwards and torch.is_grad_enabled() and _checkpoints(model):
            raise RuntimeError(
                "two forwards with gradients in one micro-batch under sequence parallelism and gradient "
                "checkpointing: the recomputation would run in the last forward's layout; run one forward per "
                "micro-batch (concatenate the parts) or set trainer.gradient_checkpointing=false"
            )
        self.stack.enter_context(sequence_parallel(model, shard, self.groups.sp_group))
        self.forwards += 1


_ACTIVE: list[Splitting] = []


def active() -> Splitting | None:
    """The scope the engine opened around the current forward, or None (no sequence parallelism)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def splitting(groups: SPGroups | None) -> Iterator[Splitting | None]:
    """The engine's scope around one micro-batch's forward and backward (or a forward without gradients) on a rank
    of ``groups``; None or an SP size of 1: nothing (yields None)."""
    if groups is None or groups.sp == 1:
        yield None
        return
    scope = Splitting(groups)
    with scope.stack:
        _ACTIVE.append(scope)
        try:
            yield scope
        finally:
            for i in range(len(_ACTIVE) - 1, -1, -1):
                if _ACTIVE[i] is scope:
                    del _ACTIVE[i]
                    break


def _checkpoints(model: Any) -> bool:
    from rlhf.models.packing import base_model

    # transformers marks each checkpointed layer (is_gradient_checkpointing is deprecated in 5.x)
    return any(getattr(m, "gradient_checkpointing", False) is True for m in base_model(model).modules())
