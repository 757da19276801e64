"""The toy rollout backend's engine actor (descriptor.py names it): the hf actor, which places the model on its
device, building the toy's own engine object (engine.py) over it, generating at most ``rollout.toy.max_batch``
sequences per call (its own key, passed by the descriptor's launch)."""

from __future__ import annotations

from typing import Any

from rlhf.backends.rollout.hf.actor import HFRolloutWorker
from toy_rollout.engine import ToyEngine


class ToyRolloutWorker(HFRolloutWorker):
    backend = "toy"  # what ready() and ping() report

    def __init__(self, *args: Any, max_batch: int = 512, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_batch = max_batch

    def build(self) -> Any:
        return ToyEngine(super().build(), self.max_batch)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "max_batch": self.engine.max_batch}
