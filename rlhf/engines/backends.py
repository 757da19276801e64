"""The training backends by their ``trainer.backend`` string. Their registry lines live in
rlhf.spec.backends.TRAIN_BACKENDS (its module and the object implementing :class:`rlhf.engines.training.TrainBackend`);
the module loads on first use, so listing a backend costs nothing to those that do not use it. No torch import: the
plan and validation read this table.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlhf.engines.training import TrainBackend
from rlhf.spec.backends import TRAIN_BACKENDS, Backend


def train_backend(name: str) -> TrainBackend:
    """The backend registered as ``name``; a ValueError naming ``trainer.backend`` and the valid names otherwise."""
    return load_backend("trainer.backend", "a training backend", TRAIN_BACKENDS, name)


def load_backend(key: str, what: str, table: dict[str, Backend], name: str) -> Any:
    """The object a registry line of ``table`` names (``module:attr``), imported on first use; a ValueError naming
    ``key`` and the valid names when ``name`` has no line."""
    try:
        target = table[name]
    except KeyError:
        raise ValueError(f"{key}={name!r}: not {what}; valid: {', '.join(sorted(table))}") from None
    module, attr = target.target.split(":")
    return getattr(importlib.import_module(module), attr)
