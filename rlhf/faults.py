"""Fault injection for the tests of fault handling (never set in normal runs).

``RLHF_FAULTS`` holds comma-separated ``point[:arg]`` entries, e.g.
``RLHF_FAULTS=sync.corrupt:model.norm.weight,sync.exit_after_bucket:1``. Code at a named point asks
:func:`fault` whether it is armed and what its argument is. The variable travels to every actor the launcher
starts (:func:`env`), so a test sets it in the driver before the run.

Points in use (grep for ``fault("``):
    sync.corrupt:NAME           a weight-sync receiver flips one byte of tensor NAME after it arrived
    sync.exit_after_bucket:N    a weight-sync receiver's process exits after receiving N buckets
    engine.exit_on_generate:N   a rollout engine's process exits on its N-th generate call (1-based)
    rank.exit_on_train_step:N   a training rank's process exits on its N-th optimizer step (1-based)
    train.nan_loss:N            the N-th optimizer step of the policy reports a NaN loss
"""

from __future__ import annotations

import os

ENV = "RLHF_FAULTS"


def _parse(value: str) -> dict[str, str]:
    out = {}
    for part in value.split(","):
        part = part.strip()
        if part:
            name, _, arg = part.partition(":")
            out[name] = arg
    return out


def fault(point: str) -> str | None:
    """The argument of an armed fault point ("" when it takes none), or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    return _parse(value).get(point)


def env() -> dict[str, str]:
    """The variable for an actor's environment, when the driver has it set."""
    value = os.environ.get(ENV)
    return {ENV: value} if value else {}
