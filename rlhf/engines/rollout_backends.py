"""The rollout backends by their ``rollout.backend`` string. Their registry lines live in
rlhf.spec.backends.ROLLOUT_BACKENDS (the module and the object implementing
:class:`rlhf.engines.protocol.RolloutBackend`); the module loads on first use. No torch import: the plan,
validation and the preflight read this table.
"""

from __future__ import annotations

import importlib

from rlhf.engines.protocol import RolloutBackend
from rlhf.spec.backends import ROLLOUT_BACKENDS


def rollout_backend(name: str) -> RolloutBackend:
    """The backend registered as ``name``; a ValueError naming ``rollout.backend`` and the valid names otherwise."""
    try:
        target = ROLLOUT_BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"rollout.backend={name!r}: not a rollout backend; valid: {', '.join(sorted(ROLLOUT_BACKENDS))}"
        ) from None
    module, attr = target.target.split(":")
    return getattr(importlib.import_module(module), attr)
