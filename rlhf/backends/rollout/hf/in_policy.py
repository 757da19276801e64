"""``rollout.hf.in_policy``: a policy rank generates with the very module it trains (as TRL's GRPOTrainer does
without vLLM, and veRL's hybrid worker holds the rollout in the trainer's process), so the run has no engine
processes and no weight sync: after each optimizer step the next samples come from the new weights by construction.

The engine is rlhf.backends.rollout.hf.engine.HFEngine over the training engine's module (``TrainEngine.module``: the
HF or
peft model DeepSpeed wraps), switched to eval mode for each call and back after, so training keeps its own mode.
Validation (rlhf.spec.rollout_backend_rules) allows it only where every rank holds the whole weights (DeepSpeed ZeRO
0-2).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlhf.backends.contract.rollout import MEMORY_TAGS, Rollout, SamplingSpec


@contextmanager
def _eval_mode(module: Any) -> Iterator[None]:
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


class InPolicyRollout:
    """The rollout engine contract's generation half, hosted in a training rank (rlhf.workers.model_worker's
    ``rollout_*`` methods call it)."""

    def __init__(self, module: Any, tokenizer: Any) -> None:
        from rlhf.backends.rollout.hf.engine import HFEngine

        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        with _eval_mode(module):  # HFEngine puts its model in eval mode; the trainer's mode is restored after
            self.engine = HFEngine(module, pad, eos, tokenizer)
        self.module = module

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "backend": "hf", "in_policy": True, "device": str(self.engine.device)}

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec | dict[str, Any]) -> list[Rollout]:
        spec = sampling if isinstance(sampling, SamplingSpec) else SamplingSpec(**sampling)
        with _eval_mode(self.module):
            return self.engine.generate([list(map(int, p)) for p in prompts], spec)

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        with _eval_mode(self.module):
            return self.engine.score([(list(p), list(o)) for p, o in sequences])

    @staticmethod
    def memory_state() -> list[str]:
        return sorted(MEMORY_TAGS)  # the trainer's weights: always where the trainer keeps them
