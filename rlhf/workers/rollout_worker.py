"""The Ray actor hosting an ``hf`` rollout engine (transformers generate). vLLM engines have their own actor
(rlhf.engines.vllm_engine.VLLMRolloutActor), which runs in the vllm side venv."""

from __future__ import annotations

import os
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec


class HFRolloutWorker:
    """One rollout engine: generate token ids, take new weights, sleep between rollouts on accelerators."""

    def __init__(self, model_path: str, accelerator: str = "cpu", precision: str = "fp32") -> None:
        import torch

        from rlhf.engines.hf_engine import HFEngine
        from rlhf.workers.base import _quiet

        _quiet()
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        device = "cuda" if accelerator == "gpu" else "cpu"
        dtype = "float32" if accelerator == "cpu" else ("bfloat16" if precision == "bf16" else "float32")
        self.engine = HFEngine.from_path(model_path, dtype=dtype, device=device)

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "backend": "hf"}

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        return self.engine.generate(prompts, sampling)

    def load_weights(self, named_tensors: list[tuple[str, Any]]) -> None:
        self.engine.load_weights(named_tensors)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()

    def shutdown(self) -> None:
        pass
