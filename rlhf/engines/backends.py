"""The training backends by their ``trainer.backend`` string. Their registry lines live in
rlhf.spec.backends.TRAIN_BACKENDS (its module and the object implementing :class:`rlhf.engines.training.TrainBackend`);
the module loads on first use, so listing a backend costs nothing to those that do not use it. No torch import: the
plan and validation read this table.
"""

from __future__ import annotations

from rlhf.engines.training import TrainBackend
from rlhf.spec.backends import TRAIN_BACKENDS
from rlhf.spec.backends import load as load_backend


def train_backend(name: str) -> TrainBackend:
    """The backend registered as ``name``; a ValueError naming ``trainer.backend`` and the valid names otherwise."""
    return load_backend("trainer.backend", "a training backend", TRAIN_BACKENDS, name)
