"""The Ray actor hosting a vLLM rollout engine. It runs with the vLLM interpreter (started by
rlhf.launch.vllm_actor), so everything crossing its boundary is plain data (lists of ints/floats, str, our own
``Rollout``/``SamplingSpec`` dataclasses, ``PackedWeights`` = list + numpy buffer, report dicts), never an HF or vLLM
object: the two venvs may carry different transformers/numpy versions.

Constructing the actor touches no device: ``start()`` builds the engine (``ready()`` starts it when needed), so the
launcher can place every engine, and ``rlhf-plan --rehearse`` can stop it where it would first touch a device
(``rehearse()``: vLLM's executor stood in for by rlhf.engines.vllm_placement)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.engines.vllm_placement import configure_device_env


class VLLMRolloutActor:
    """A VLLMEngine behind a Ray actor boundary; start it with ``rlhf.launch.vllm_actor.start_vllm_rollout_actor``."""

    def __init__(
        self,
        model_path: str,
        *,
        bundle_indices: list[int] | None = None,
        per_worker_gpus: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self.model_path = model_path
        self.engine_kwargs = engine_kwargs
        self.engine: Any = None
        self.awake = {"weights", "kv_cache"}  # rehearsal: what a real engine would have in device memory
        tp = int(engine_kwargs.get("tensor_parallel_size", 1))
        self.device_env = configure_device_env(os.environ, tp, bundle_indices, per_worker_gpus)

    def start(self) -> dict[str, Any]:
        """Build the engine (loads the weights onto the device); returns what :meth:`ready` returns."""
        from rlhf.engines.vllm_engine import VLLMEngine

        if self.engine is None:
            self.engine = VLLMEngine(self.model_path, **self.engine_kwargs)
        return self.ready()

    def ready(self) -> dict[str, Any]:
        if self.engine is None:
            self.start()
        return {
            "python": sys.executable,
            "vllm": self.engine.vllm_version,
            "platform": "cpu" if self.engine.on_cpu else "gpu",
            "sleep_supported": self.engine.sleep_supported,
            "start_seconds": self.engine.start_seconds,
            "pid": os.getpid(),
        }

    def rehearse(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """What :meth:`start` would do up to the first device access: the version check, the environment vLLM
        would read, and (TP > 1) its workers placed in their bundles by vLLM's rule; nothing is loaded."""
        import ray

        from rlhf.engines.vllm_placement import assign_tp_devices
        from rlhf.engines.vllm_version import check_vllm_version

        version = check_vllm_version()
        tp = int(self.engine_kwargs.get("tensor_parallel_size", 1))
        ctx = ray.get_runtime_context()
        own = [int(i) for i in ctx.get_accelerator_ids().get("GPU", [])]
        report: dict[str, Any] = {
            "python": sys.executable,
            "vllm": version,
            "pid": os.getpid(),
            "node_id": ctx.get_node_id(),
            "gpu_ids": own,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "env": dict(self.device_env),
            "engine_kwargs": {k: v for k, v in self.engine_kwargs.items() if isinstance(v, (int, float, str, bool))},
        }
        if tp > 1:
            report["workers"] = [w.to_dict() for w in assign_tp_devices(tp, timeout_s)]
        else:
            # TP 1: vLLM's uniprocess executor computes in this process, on cuda:0 of what Ray made visible.
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            device = int(visible.split(",")[0]) if visible else (own[0] if own else None)
            report["workers"] = [
                {"rank": 0, "bundle": None, "node_id": ctx.get_node_id(), "gpu_ids": own, "local_rank": 0,
                 "device": device, "gpus": None}
            ]
        return report

    def memory_state(self) -> list[str]:
        """What of the engine is in device memory now (rehearsal: as the real engine's sleep/wake would leave it)."""
        return sorted(self.engine.awake if self.engine is not None else self.awake)

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec | dict[str, Any]) -> list[Rollout]:
        from rlhf import faults

        if faults.count_hits("engine.exit_on_generate"):
            os._exit(1)  # fault injection: the engine's process dies mid-generate
        spec = sampling if isinstance(sampling, SamplingSpec) else SamplingSpec(**sampling)
        return self._engine().generate(prompts, spec)

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self._engine().score([(list(p), list(o)) for p, o in sequences])

    def load_weights(self, packed: Any) -> float:
        """Returns the seconds spent inside the engine (the rest of a sync is transport)."""
        t0 = time.perf_counter()
        self._engine().load_weights(packed)
        return time.perf_counter() - t0

    def load_from_path(self, path: str) -> None:
        self._engine().load_from_path(path)

    def sync_location(self) -> list[dict[str, Any]]:
        """Where each worker of this engine runs, in tensor-parallel rank order."""
        return self._engine().sync_locations()

    def sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> list[dict[str, Any]]:
        return self._engine().sync_connect(cfg, routes)

    def sync_pull(self, version: int, measure_memory: bool = False) -> list[dict[str, Any]]:
        from rlhf.engines.weight_sync.memory import PeakRSS

        with PeakRSS(measure_memory) as peak:
            reports = self._engine().sync_pull(version)
        for r in reports:
            r["peak_rss_delta_mb"] = peak.delta_mb
        return reports

    def sync_close(self) -> None:
        self._engine().sync_close()

    def sleep(self, level: int = 1) -> None:
        if self.engine is None:
            self.awake = set()
            return
        self.engine.sleep(level)

    def wake(self, tags: list[str] | None = None) -> None:
        if self.engine is None:
            self.awake |= set(tags or ["weights", "kv_cache"])
            return
        self.engine.wake(tags)

    def empty_cache(self) -> None:
        if self.engine is not None:
            self.engine.empty_cache()

    def _engine(self) -> Any:
        if self.engine is None:
            self.start()
        return self.engine
