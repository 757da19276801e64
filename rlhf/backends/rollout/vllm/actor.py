"""The Ray actor hosting a vLLM rollout engine. It runs with the vLLM interpreter
(rlhf.backends.rollout.vllm.descriptor says
which and how it is started), so everything crossing its boundary is plain data (lists of ints/floats, str, our own
``Rollout``/``SamplingSpec`` dataclasses, the weight-sync wire format, report dicts), never an HF or vLLM object: the
two venvs may carry different transformers/numpy versions. The contract: rlhf.backends.contract.rollout.RolloutEngine.

Constructing the actor touches no device (the engine is built by ``ready()``), so the launcher can place every
engine, and ``rlhf-plan --rehearse`` can stop it where it would first touch a device (``rehearse()``: vLLM's
executor stood in for by rlhf.backends.rollout.vllm.placement)."""

from __future__ import annotations

import os
import sys
from typing import Any

from rlhf.backends.rollout.vllm.placement import configure_device_env
from rlhf.backends.shared.rollout_actor import RolloutActor


class VLLMRolloutActor(RolloutActor):
    """A VLLMEngine behind a Ray actor boundary (started by rlhf.launch.rollout from
    rlhf.backends.rollout.vllm.descriptor's launch)."""

    backend = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        bundle_indices: list[int] | None = None,
        per_worker_gpus: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__()
        self.model_path = model_path
        self.engine_kwargs = engine_kwargs
        tp = int(engine_kwargs.get("tensor_parallel_size", 1))
        self.device_env = configure_device_env(os.environ, tp, bundle_indices, per_worker_gpus)

    def build(self) -> Any:
        from rlhf.backends.rollout.vllm.engine import VLLMEngine

        return VLLMEngine(self.model_path, **self.engine_kwargs)

    def info(self) -> dict[str, Any]:
        return {
            "python": sys.executable,
            "vllm": self.engine.vllm_version,
            "platform": "cpu" if self.engine.on_cpu else "gpu",
            "sleep_supported": self.engine.sleep_supported,
            "start_seconds": self.engine.start_seconds,
        }

    def rehearse(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """The version check, the environment vLLM would read, and (TP > 1) its workers placed in their bundles by
        vLLM's rule; nothing is loaded."""
        from rlhf.backends.rollout.vllm.placement import assign_tp_devices
        from rlhf.backends.rollout.vllm.version import check_vllm_version

        report = super().rehearse(timeout_s)
        report.update(
            python=sys.executable,
            vllm=check_vllm_version(),
            env=dict(self.device_env),
            engine_kwargs={k: v for k, v in self.engine_kwargs.items() if isinstance(v, (int, float, str, bool))},
        )
        tp = int(self.engine_kwargs.get("tensor_parallel_size", 1))
        if tp > 1:
            report["workers"] = [w.to_dict() for w in assign_tp_devices(tp, timeout_s)]
        return report
