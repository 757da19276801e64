"""What every Ray worker does first: quiet logs, size its thread pool, join its process group (the training backend
forms it), and leave it."""

from __future__ import annotations

import logging
import os
import warnings

from rlhf.futures import ray_actor
from rlhf.spec.schema import ExperimentSpec


def _quiet() -> None:
    # torch.distributed's deprecation notices fire on every ZeRO collective; DeepSpeed logs at INFO per engine.
    warnings.filterwarnings("ignore", message=r".*torch\.distributed\..* is deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
    for name in ("DeepSpeed", "deepspeed", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.WARNING)


def physical_device(local_rank: int, cuda_visible: str | None, node_gpus: int) -> int:
    """The physical GPU a rank computes on: ``torch.cuda.set_device(LOCAL_RANK % device_count)`` (what
    rlhf.backends.train.deepspeed.engine.init_distributed does) read through CUDA_VISIBLE_DEVICES (all of the node's
    GPUs
    when it is unset, as for colocated ranks that see every GPU)."""
    visible = [int(x) for x in cuda_visible.split(",") if x.strip()] if cuda_visible else list(range(node_gpus))
    if not visible:
        raise RuntimeError(f"LOCAL_RANK {local_rank}: no GPU visible (CUDA_VISIBLE_DEVICES={cuda_visible!r})")
    return visible[local_rank % len(visible)]


class BaseWorker:
    """One rank of a role. RANK / WORLD_SIZE / MASTER_* come from the role group's environment.

    Constructing it touches no device and imports no torch (``rlhf-plan --rehearse`` starts these actors and asks
    :meth:`placement` where they would compute); the thread pool is sized when the rank joins its group."""

    def __init__(self, spec: ExperimentSpec, role: str) -> None:
        _quiet()
        self.spec = spec
        self.role = role
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        ray = ray_actor()  # None on the local executor: its process computes where it was started
        if (
            ray is not None
            and spec.hardware.accelerator == "gpu"
            and os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
        ):
            gpu_ids = ray.get_gpu_ids()
            if gpu_ids:  # colocated roles see every GPU: use the one Ray assigned
                os.environ["LOCAL_RANK"] = str(int(gpu_ids[0]))
        self._dist_ready = False

    @property
    def backend(self):
        """The training backend of ``trainer.backend`` (rlhf.backends.contract.training.TrainBackend)."""
        from rlhf.spec.registry import train_backend

        return train_backend(self.spec.trainer.backend)

    def _size_threads(self) -> None:
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if threads > 0:
            import torch

            torch.set_num_threads(threads)

    def init_distributed(self) -> None:
        if not self._dist_ready:
            self._size_threads()
            self.backend.init_distributed(self.spec.hardware.accelerator)
            self._dist_ready = True

    def ping(self) -> dict[str, int | str]:
        return {"role": self.role, "rank": self.rank, "world_size": self.world_size, "pid": os.getpid()}

    def heartbeat(self) -> dict[str, object]:
        """The driver's liveness call while it waits on this rank (rlhf.waits), answered in its own concurrency
        group while a long call runs (rlhf.backends.shared.liveness.remote_class marks it): pid and node (the call it
        runs
        is the one the driver waits on)."""
        from rlhf.backends.shared import liveness

        return {**liveness.answer(track=False), "role": self.role, "rank": self.rank}

    def placement(self) -> dict[str, object]:
        """Where this rank would compute, from what Ray and the launcher gave it (no device touched): its node,
        Ray's GPU ids, CUDA_VISIBLE_DEVICES, LOCAL_RANK, rank and world size of its training group, and the physical
        GPU :func:`physical_device` picks (None on CPU hardware)."""
        import ray

        ctx = ray.get_runtime_context()
        gpu_ids = [int(i) for i in ctx.get_accelerator_ids().get("GPU", [])]
        local = int(os.environ.get("LOCAL_RANK", "0"))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        device = None
        if self.spec.hardware.accelerator == "gpu":
            device = physical_device(local, visible, self.spec.hardware.devices_per_node)
        return {
            "role": self.role,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": local,
            "pid": os.getpid(),
            "node_id": ctx.get_node_id(),
            "gpu_ids": gpu_ids,
            "cuda_visible_devices": visible,
            "noset": bool(os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")),
            "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
            "device": device,
            # how RANK reached this process: its actor's runtime_env (a fresh worker), or set in the process
            "rank_env": "runtime_env" if "RANK" in (ctx.runtime_env.get("env_vars") or {}) else "process",
        }

    def shutdown(self) -> None:
        import sys

        if "torch.distributed" not in sys.modules:
            return  # never joined a group (a rehearsal, or a rank that failed before): nothing to leave
        self.backend.leave()
        self._dist_ready = False
