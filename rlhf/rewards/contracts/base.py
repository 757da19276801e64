"""What every contract provides: whether a signature takes its call, the call itself, and the reading of what came
back into :class:`Scores`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlhf.rewards.batch import RewardBatch
from rlhf.rewards.contracts.signature import Params


@dataclass
class Scores:
    """One function's output for a batch: ``values`` (NaN where the function declined the sample: TRL's None),
    ``scores`` (OpenRLHF's separate score, else None) and ``extra_logs`` (name -> one number per sample)."""

    values: list[float]
    scores: list[float] | None = None
    extra_logs: dict[str, list[float]] = field(default_factory=dict)

    @property
    def declined(self) -> list[bool]:
        return [math.isnan(v) for v in self.values]


@dataclass
class CallOptions:
    """What the call needs beyond the batch: the dataset column the label comes from (TRL passes it by that name)."""

    label_key: str | None = "label"


class Contract(Protocol):
    name: str
    #: How a user writes a function of this contract (the fix in messages).
    definition: str
    #: Parameter names only this contract uses: a signature naming one is read in it.
    markers: frozenset[str]

    def binds(self, params: Params) -> str | None:
        """None when this contract's call fits ``params``, else why not (a phrase)."""
        ...

    def invoke(self, fn: Callable[..., Any], batch: RewardBatch, options: CallOptions) -> Any:
        """Call ``fn`` on ``batch``; the value may be awaitable (an ``async def``), awaited by the caller."""
        ...

    def read(self, out: Any, n: int, origin: str) -> Scores:
        """Check ``out`` (awaited) for ``n`` samples; a RewardError names ``origin`` and what is wrong."""
        ...
