"""The toy rollout backend's engine actor (descriptor.py names it): the hf engine under the toy's name, generating at
most ``rollout.toy.max_batch`` sequences per call (its own key, passed by the descriptor's launch)."""

from __future__ import annotations

from typing import Any

from rlhf.backends.rollout.hf.actor import HFRolloutWorker


class ToyRolloutWorker(HFRolloutWorker):
    backend = "toy"  # what ready() and ping() report

    def __init__(self, *args: Any, max_batch: int = 512, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_batch = max_batch

    def build(self) -> Any:
        engine = super().build()
        engine.max_batch_size = self.max_batch  # rlhf.backends.rollout.hf.engine.HFEngine splits larger requests
        return engine

    def info(self) -> dict[str, Any]:
        return {**super().info(), "max_batch": self.engine.max_batch_size}
