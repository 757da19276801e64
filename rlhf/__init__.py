"""rlhf: a declarative, Hydra-configured RLHF training platform."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def run(*args: Any, **kwargs: Any) -> Any:
    """Train from Python: ``rlhf.run(recipe, *overrides, reward_funcs=..., train_dataset=..., eval_dataset=...)``
    (rlhf.api.run; imported on first call, so ``import rlhf`` stays light)."""
    from rlhf.api import run as run_

    return run_(*args, **kwargs)
