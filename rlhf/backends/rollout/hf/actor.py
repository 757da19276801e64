"""The Ray actor hosting an ``hf`` rollout engine (transformers generate), in the trainer's venv. The contract it
keeps is rlhf.backends.contract.rollout.RolloutEngine (rlhf.backends.shared.rollout_actor has the common part); vLLM's
actor is
rlhf.backends.rollout.vllm.actor.VLLMRolloutActor."""

from __future__ import annotations

import os
from typing import Any

from rlhf.backends.shared.rollout_actor import RolloutActor


def engine_device(accelerator: str, gpu_ids: list[int], noset: bool) -> str:
    """The torch device the engine computes on: the CPU; or the first GPU Ray made visible; or, where colocated
    roles see every GPU (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES), the GPU Ray reserved for this actor -- not
    cuda:0, which every engine of the node would otherwise share."""
    if accelerator != "gpu":
        return "cpu"
    return f"cuda:{int(gpu_ids[0])}" if noset and gpu_ids else "cuda:0"


class HFRolloutWorker(RolloutActor):
    """One hf rollout engine; constructing it loads nothing (:meth:`ready` does)."""

    backend = "hf"

    def __init__(
        self, model_path: str, accelerator: str = "cpu", precision: str = "fp32", lora: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.model_path = model_path
        self.accelerator = accelerator
        self.precision = precision
        self.lora = (
            lora  # rollout.weight_sync_lora=adapter: model.lora's settings (rlhf.backends.rollout.hf.descriptor)
        )

    def build(self) -> Any:
        import torch

        from rlhf.backends.rollout.hf.engine import HFEngine
        from rlhf.backends.shared.worker_base import _quiet
        from rlhf.futures import ray_actor

        _quiet()
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        noset = bool(os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"))
        ray = ray_actor()  # None on the local executor: its engine computes where its process does
        gpu_ids = [int(i) for i in ray.get_gpu_ids()] if ray is not None else []
        device = engine_device(self.accelerator, gpu_ids, noset)
        dtype = "float32" if self.accelerator == "cpu" else ("bfloat16" if self.precision == "bf16" else "float32")
        return HFEngine.from_path(self.model_path, dtype=dtype, device=device, lora=self.lora)

    def info(self) -> dict[str, Any]:
        return {"device": str(self.engine.device), "lora_adapter": self.lora is not None}

    def rehearse(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Where :meth:`build` would compute (rlhf.backends.rollout.hf.actor.engine_device on what Ray gave this
        process), as the physical GPU of its node; nothing is loaded."""
        report = super().rehearse(timeout_s)
        noset = bool(os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"))
        device = engine_device(self.accelerator, report["gpu_ids"], noset)
        physical = None
        if device != "cpu":
            index, visible = int(device.split(":")[1]), report["cuda_visible_devices"]
            physical = int(visible.split(",")[index]) if visible else index
        report["workers"][0]["device"] = physical
        report["engine_device"] = device
        return report
