"""The Ray actor hosting an ``hf`` rollout engine (transformers generate). vLLM engines have their own actor
(rlhf.workers.vllm_rollout_worker.VLLMRolloutActor), which runs in the vllm side venv."""

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
        self.model_path = model_path
        self.engine = HFEngine.from_path(model_path, dtype=dtype, device=device)

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "backend": "hf"}

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        from rlhf import faults

        if faults.count_hits("engine.exit_on_generate"):
            os._exit(1)  # fault injection: the engine's process dies mid-generate
        return self.engine.generate(prompts, sampling)

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self.engine.score([(list(p), list(o)) for p, o in sequences])

    def load_weights(self, named_tensors: list[tuple[str, Any]]) -> None:
        self.engine.load_weights(named_tensors)

    def load_from_path(self, path: str) -> None:
        """Reload every weight from a Hugging Face folder (what a fresh engine started on ``path`` would hold)."""
        from transformers import AutoModelForCausalLM

        fresh = AutoModelForCausalLM.from_pretrained(path, dtype=next(self.engine.model.parameters()).dtype)
        self.engine.load_weights(list(fresh.state_dict().items()))

    # -- weight sync: this engine's worker receives -----------------------------------------------------------
    def sync_location(self) -> list[dict[str, Any]]:
        """Where this engine's one worker (this process) runs."""
        from rlhf.engines.weight_sync import member_location

        return [member_location()]

    def sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> dict[str, Any]:
        from rlhf.engines.weight_sync import GroupConfig, WeightReceiver

        route = routes[0] if isinstance(routes, (list, tuple)) else routes
        self.sync_close()
        self._receiver = WeightReceiver(GroupConfig.from_dict(cfg), device=self.engine.device, route=route)
        return {"rank": cfg["rank"], "route": route}

    def sync_pull(self, version: int, measure_memory: bool = False) -> list[dict[str, Any]]:
        """Load the weights the sender streams: each tensor received straight into the model's parameter (or, where
        dtype or layout differ, copied in as it arrives)."""
        from rlhf.engines.weight_sync.memory import PeakRSS

        self.engine.wake()
        targets = self.engine.direct_targets()
        with PeakRSS(measure_memory) as peak:
            stream = self._receiver.pull(version, into=lambda e: targets(e.name, e.dtype, e.shape))
            self.engine.load_weights(stream)
        report = self._receiver.report.to_dict()
        report["peak_rss_delta_mb"] = peak.delta_mb
        return [report]

    def sync_close(self) -> None:
        receiver = getattr(self, "_receiver", None)
        if receiver is not None:
            receiver.close()
            self._receiver = None

    def sleep(self, level: int = 1) -> None:
        self.engine.sleep()  # the whole model to host memory (level has no meaning for transformers)

    def wake(self, tags: list[str] | None = None) -> None:
        self.engine.wake()

    def empty_cache(self) -> None:
        return None  # HFEngine.sleep empties the CUDA cache itself

    def memory_state(self) -> list[str]:
        return [] if self.engine._asleep else ["weights", "kv_cache"]

    def shutdown(self) -> None:
        self.sync_close()
