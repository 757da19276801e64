"""The trackers ``logging.trackers`` accepts, keyed by their config string: the registry line is the only place a
new tracker is named (beside its module and its ``conf/logging/<name>.yaml``).

Entries name their class by import path and the package it needs, so validation (``rlhf.spec.validate``) reads the
names and checks the package without importing any tracker or tracking library.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from rlhf.tracking.protocol import Tracker, TrackerUnavailable


@dataclass(frozen=True)
class Entry:
    target: str  # "module:Class" implementing rlhf.tracking.protocol.Tracker
    package: str = ""  # the module it imports ("" when the core install has all it needs)
    extra: str = ""  # the pip extra that installs ``package`` ("" when a core dependency does)


TRACKERS: dict[str, Entry] = {
    "mlflow": Entry("rlhf.tracking.mlflow_tracker:MlflowTracker", "mlflow"),
    "tensorboard": Entry("rlhf.tracking.tensorboard_tracker:TensorBoardTracker", "tensorboard", "tensorboard"),
    "wandb": Entry("rlhf.tracking.wandb_tracker:WandbTracker", "wandb", "wandb"),
    "console": Entry("rlhf.tracking.console_tracker:ConsoleTracker"),
}


def names() -> tuple[str, ...]:
    return tuple(TRACKERS)


def missing_package(name: str) -> str | None:
    """Why tracker ``name`` cannot start here (its package is not installed, with the command that installs it),
    or None."""
    entry = TRACKERS[name]
    if not entry.package or importlib.util.find_spec(entry.package) is not None:
        return None
    how = f"pip install 'rlhf[{entry.extra}]'" if entry.extra else f"pip install {entry.package}"
    return f"the {name} tracker needs the {entry.package} package: {how}"


def create(name: str) -> Tracker:
    """A new, not yet started tracker ``name``."""
    if name not in TRACKERS:
        raise KeyError(f"logging.trackers: no tracker {name!r}; known: {', '.join(TRACKERS)}")
    why = missing_package(name)
    if why:
        raise TrackerUnavailable(why)
    module, _, cls = TRACKERS[name].target.partition(":")
    return getattr(importlib.import_module(module), cls)()
