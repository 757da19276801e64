"""The rollout backends by their ``rollout.backend`` string. Their registry lines live in
rlhf.spec.backends.ROLLOUT_BACKENDS (the module and the object implementing
:class:`rlhf.engines.protocol.RolloutBackend`); the module loads on first use. No torch import: the plan,
validation and the preflight read this table.
"""

from __future__ import annotations

from rlhf.engines.backends import load_backend
from rlhf.engines.protocol import RolloutBackend
from rlhf.spec.backends import ROLLOUT_BACKENDS


def rollout_backend(name: str) -> RolloutBackend:
    """The backend registered as ``name``; a ValueError naming ``rollout.backend`` and the valid names otherwise."""
    return load_backend("rollout.backend", "a rollout backend", ROLLOUT_BACKENDS, name)
