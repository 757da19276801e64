"""The trackers ``logging.trackers`` accepts, keyed by their config string. Their registry line lives in
rlhf.spec.registry.TRACKERS (the only place a new tracker is named, beside its module and its
``conf/logging/<name>.yaml``), so validation checks names and packages without importing any tracking library."""

from __future__ import annotations

import importlib

from rlhf.spec.registry import TRACKERS
from rlhf.spec.registry import missing_package as _missing
from rlhf.tracking.protocol import Tracker, TrackerUnavailable


def names() -> tuple[str, ...]:
    return tuple(TRACKERS)


def missing_package(name: str) -> str | None:
    """Why tracker ``name`` cannot start here (its package is not installed, with the command that installs it),
    or None."""
    return _missing("tracker", TRACKERS, name)


def create(name: str) -> Tracker:
    """A new, not yet started tracker ``name``."""
    if name not in TRACKERS:
        raise KeyError(f"logging.trackers: no tracker {name!r}; known: {', '.join(TRACKERS)}")
    why = missing_package(name)
    if why:
        raise TrackerUnavailable(why)
    module, _, cls = TRACKERS[name].target.partition(":")
    return getattr(importlib.import_module(module), cls)()
