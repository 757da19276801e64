"""The Ray actor hosting a vLLM rollout engine. It runs with the vLLM venv's interpreter (started by
rlhf.launch.vllm_actor), so everything crossing its boundary is plain data (lists of ints/floats, str, our own
``Rollout``/``SamplingSpec`` dataclasses, ``PackedWeights`` = list + numpy buffer, report dicts), never an HF or vLLM
object: the two venvs carry different transformers/numpy versions."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.engines.vllm_engine import PackedWeights, VLLMEngine


class VLLMRolloutActor:
    """A VLLMEngine behind a Ray actor boundary; start it with ``rlhf.launch.vllm_actor.start_vllm_rollout_actor``."""

    def __init__(self, model_path: str, **engine_kwargs: Any) -> None:
        self.engine = VLLMEngine(model_path, **engine_kwargs)

    def ready(self) -> dict[str, Any]:
        import vllm

        return {
            "python": sys.executable,
            "vllm": vllm.__version__,
            "platform": "cpu" if self.engine.on_cpu else "gpu",
            "sleep_supported": self.engine.sleep_supported,
            "start_seconds": self.engine.start_seconds,
            "pid": os.getpid(),
        }

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec | dict[str, Any]) -> list[Rollout]:
        from rlhf import faults

        if faults.count_hits("engine.exit_on_generate"):
            os._exit(1)  # fault injection: the engine's process dies mid-generate
        spec = sampling if isinstance(sampling, SamplingSpec) else SamplingSpec(**sampling)
        return self.engine.generate(prompts, spec)

    def load_weights(self, packed: PackedWeights) -> float:
        """Returns the seconds spent inside the engine (the rest of a sync is transport)."""
        t0 = time.perf_counter()
        self.engine.load_weights(packed)
        return time.perf_counter() - t0

    def load_from_path(self, path: str) -> None:
        self.engine.load_from_path(path)

    def sync_location(self) -> dict[str, Any]:
        from rlhf.engines.weight_sync import member_location

        return member_location()

    def sync_connect(self, cfg: dict[str, Any], route: str) -> list[dict[str, Any]]:
        return self.engine.sync_connect(cfg, route)

    def sync_pull(self, version: int, measure_memory: bool = False) -> list[dict[str, Any]]:
        from rlhf.engines.weight_sync.memory import PeakRSS

        with PeakRSS(measure_memory) as peak:
            reports = self.engine.sync_pull(version)
        for r in reports:
            r["peak_rss_delta_mb"] = peak.delta_mb
        return reports

    def sync_close(self) -> None:
        self.engine.sync_close()

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()
