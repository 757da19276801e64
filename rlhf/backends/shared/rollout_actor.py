"""What every rollout engine's Ray actor shares: the :class:`rlhf.backends.contract.rollout.RolloutEngine` contract
over an engine object built on first use. A backend's actor subclasses :class:`RolloutActor` and says how to build
its engine (:meth:`RolloutActor.build`) and what :meth:`RolloutActor.ready` adds about it; the engine it builds
answers ``generate``, ``score``, ``load_packed``, ``load_from_path``, ``sync_locations``, ``sync_connect``,
``sync_pull``, ``sync_close``, ``sleep(level)``, ``wake(tags)``, ``empty_cache`` and holds ``awake`` (the tags in
device memory). rlhf.backends.shared.rollout_engine.RolloutEngineBase gives all but ``generate`` and ``score`` from
the engine's ``load_weights`` (rlhf.backends.rollout.hf.engine.HFEngine subclasses it); vLLM's engine
(rlhf.backends.rollout.vllm.engine.VLLMEngine) answers them itself, through its workers.

This module runs in every engine's interpreter (the vLLM venv too) and in the local executor's one process: it
imports the standard library, Ray only where a method asks Ray, and rlhf only where the contract needs it. ``ping``
and ``heartbeat`` run in the liveness concurrency group of the actor (rlhf.backends.shared.liveness.remote_class).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlhf.backends.contract.rollout import MEMORY_TAGS, Rollout, SamplingSpec
from rlhf.backends.shared import liveness


class RolloutActor:
    """One engine behind a Ray actor boundary. Constructing it touches no device; the engine is built by
    :meth:`ready` (or by the first call that needs it)."""

    backend = ""  # the rollout.backend string

    def __init__(self) -> None:
        self.engine: Any = None
        self._tags: set[str] = set(MEMORY_TAGS)  # before the engine is built: what sleep/wake would have left
        self._busy: tuple[str, float] | None = None

    # -- what a backend provides ----------------------------------------------------------------------------------
    def build(self) -> Any:
        """Build the engine (loads the weights onto the device)."""
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """What :meth:`ready` says about the built engine beyond pid and backend."""
        return {}

    # -- the contract ---------------------------------------------------------------------------------------------
    @contextmanager
    def _running(self, name: str) -> Iterator[None]:
        self._busy = (name, time.monotonic())
        try:
            yield
        finally:
            self._busy = None

    def _engine(self) -> Any:
        if self.engine is None:
            with self._running("ready"):
                self.engine = self.build()
        return self.engine

    def ready(self) -> dict[str, Any]:
        self._engine()
        return {"pid": os.getpid(), "backend": self.backend, **self.info()}

    def ping(self) -> dict[str, Any]:
        busy = self._busy
        return {
            "pid": os.getpid(),
            "backend": self.backend,
            "built": self.engine is not None,
            "busy": busy[0] if busy else None,
            "busy_s": round(time.monotonic() - busy[1], 3) if busy else 0.0,
        }

    def heartbeat(self) -> dict[str, Any]:
        """The driver's liveness call while it waits on this engine (rlhf.waits): pid, node, the call running."""
        return {**liveness.answer(self._busy), "backend": self.backend}

    def rehearse(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """One worker, in this process: it computes on the first GPU this process sees (Ray's CUDA_VISIBLE_DEVICES),
        or, where colocated roles see every GPU (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES), on the one Ray
        reserved for it. Subclasses add their own checks (and their TP workers)."""
        import ray

        ctx = ray.get_runtime_context()
        own = [int(i) for i in ctx.get_accelerator_ids().get("GPU", [])]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        device = int(visible.split(",")[0]) if visible else (own[0] if own else None)
        return {
            "pid": os.getpid(),
            "backend": self.backend,
            "node_id": ctx.get_node_id(),
            "gpu_ids": own,
            "cuda_visible_devices": visible,
            "env": {},
            "workers": [
                {
                    "rank": 0,
                    "bundle": None,
                    "node_id": ctx.get_node_id(),
                    "gpu_ids": own,
                    "local_rank": 0,
                    "device": device,
                    "gpus": None,
                }
            ],
        }

    def memory_state(self) -> list[str]:
        return sorted(self.engine.awake if self.engine is not None else self._tags)

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec | dict[str, Any]) -> list[Rollout]:
        from rlhf import faults

        if faults.count_hits("engine.exit_on_generate"):
            os._exit(1)  # fault injection: the engine's process dies mid-generate
        if faults.count_hits("engine.stop_on_generate"):
            faults.stop_self("engine.stop_on_generate")  # fault injection: the engine's process stops running
        spec = sampling if isinstance(sampling, SamplingSpec) else SamplingSpec(**sampling)
        engine = self._engine()
        with self._running("generate"):
            return engine.generate([list(map(int, p)) for p in prompts], spec)

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        engine = self._engine()
        with self._running("score"):
            return engine.score([(list(p), list(o)) for p, o in sequences])

    def load_weights(self, packed: Any) -> list[dict[str, Any]]:
        engine = self._engine()
        with self._running("load_weights"):
            return engine.load_packed(packed)

    def load_from_path(self, path: str) -> None:
        engine = self._engine()
        with self._running("load_from_path"):
            engine.load_from_path(path)

    def sync_location(self) -> list[dict[str, Any]]:
        return self._engine().sync_locations()

    def sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> list[dict[str, Any]]:
        engine = self._engine()
        with self._running("sync_connect"):
            return engine.sync_connect(cfg, list(routes))

    def sync_pull(self, version: int, measure_memory: bool = False) -> list[dict[str, Any]]:
        from rlhf.backends.weight_sync.memory import PeakRSS

        engine = self._engine()
        with self._running("sync_pull"), PeakRSS(measure_memory) as peak:
            reports = engine.sync_pull(version)
        for r in reports:
            r["peak_rss_delta_mb"] = peak.delta_mb
        return reports

    def sync_close(self) -> None:
        if self.engine is not None:
            self.engine.sync_close()

    def sleep(self, level: int = 1) -> None:
        if self.engine is None:
            self._tags = set()
            return
        self.engine.sleep(level)

    def wake(self, tags: list[str] | None = None) -> None:
        if self.engine is None:
            self._tags |= set(tags or MEMORY_TAGS)
            return
        self.engine.wake(tags)

    def empty_cache(self) -> None:
        if self.engine is not None:
            self.engine.empty_cache()

    def shutdown(self) -> None:
        self.sync_close()
