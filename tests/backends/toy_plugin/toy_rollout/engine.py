"""The toy rollout backend's engine object: what a new rollout engine writes over
rlhf.backends.shared.rollout_engine.RolloutEngineBase, and no more. Its own: construction, ``generate``, ``score`` and
``load_weights``, each over its generation library (here transformers through the hf engine, as SGLang's would be
``sglang.Engine``). Inherited: the weight sync's receiving side on every route, the object-store route, reloading a
folder, and sleep/wake/empty_cache for a CPU with nothing to release."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.backends.shared.rollout_engine import RolloutEngineBase


class ToyEngine(RolloutEngineBase):
    """Generates at most ``max_batch`` sequences at once (``rollout.toy.max_batch``); more go in waves."""

    def __init__(self, library: Any, max_batch: int) -> None:
        super().__init__()
        self.library = library  # rlhf.backends.rollout.hf.engine.HFEngine, the model on its device
        self.library.max_batch_size = max_batch  # it splits larger requests into waves
        self.max_batch = max_batch
        self.device = library.device  # a sync's tensors land there

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        return self.library.generate(prompts, sampling)

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self.library.score(sequences)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        self.library.load_weights(named_tensors)
