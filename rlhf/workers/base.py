"""What every Ray worker does first: quiet logs, size its thread pool, join its process group (the training backend
forms it), and leave it."""

from __future__ import annotations

import logging
import os
import warnings

from rlhf.spec.schema import ExperimentSpec


def _quiet() -> None:
    # torch.distributed's deprecation notices fire on every ZeRO collective; DeepSpeed logs at INFO per engine.
    warnings.filterwarnings("ignore", message=r".*torch\.distributed\..* is deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
    for name in ("DeepSpeed", "deepspeed", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.WARNING)


class BaseWorker:
    """One rank of a role. RANK / WORLD_SIZE / MASTER_* come from the role group's environment."""

    def __init__(self, spec: ExperimentSpec, role: str) -> None:
        _quiet()
        import torch

        self.spec = spec
        self.role = role
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        if spec.hardware.accelerator == "gpu" and os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
            import ray

            gpu_ids = ray.get_gpu_ids()
            if gpu_ids:  # colocated roles see every GPU: use the one Ray assigned
                os.environ["LOCAL_RANK"] = str(int(gpu_ids[0]))
        self._dist_ready = False

    @property
    def backend(self):
        """The training backend of ``trainer.backend`` (rlhf.engines.training.TrainBackend)."""
        from rlhf.engines.backends import train_backend

        return train_backend(self.spec.trainer.backend)

    def init_distributed(self) -> None:
        if not self._dist_ready:
            self.backend.init_distributed(self.spec.hardware.accelerator)
            self._dist_ready = True

    def ping(self) -> dict[str, int | str]:
        return {"role": self.role, "rank": self.rank, "world_size": self.world_size, "pid": os.getpid()}

    def shutdown(self) -> None:
        from rlhf.engines.distributed import shutdown_distributed

        shutdown_distributed()
        self._dist_ready = False
