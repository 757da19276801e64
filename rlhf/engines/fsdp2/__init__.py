"""``trainer.backend=fsdp2``: torch's ``fully_shard`` (FSDP2) over a device mesh of the role's ranks, gloo on CPU
(torch's CPU device mesh) and nccl on GPUs.

    __init__.py   this backend as rlhf.engines.training.TrainBackend (no torch import: the plan and validation use it)
    engine.py     FSDP2TrainEngine and FSDP2FrozenEngine: sharding, mixed precision, CPU offload, the optimizer step,
                  torch.distributed.checkpoint save/load, the Hugging Face export
    memory.py     the plan's memory model
Its keys: ``trainer.fsdp2.*`` (rlhf.spec.schema.FSDP2Spec); its rules: rlhf.spec.trainer_backends. The weights reach
the rollout engines through rlhf.engines.weights (each DTensor gathered with ``full_tensor`` one bucket at a time).
"""

from __future__ import annotations

from typing import Any

from rlhf.engines.fsdp2 import memory
from rlhf.engines.training import ModelLoader, ModelStates
from rlhf.spec.schema import ExperimentSpec


class FSDP2Backend:
    name = "fsdp2"

    def describe(self, spec: ExperimentSpec) -> str:
        t, f = spec.trainer, spec.trainer.fsdp2
        compute = "bf16 compute over fp32 shards, fp32 gradient reduce" if t.precision == "bf16" else t.precision
        reshard = "resharded after forward" if f.reshard_after_forward else "kept gathered from forward to backward"
        offload = ", shards and optimizer step in host memory (CPUOffloadPolicy)" if f.cpu_offload else ""
        return f"fsdp2 (fully_shard per decoder layer), {compute}, units {reshard}{offload}; frozen models sharded"

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        from rlhf.engines.distributed import init_process_group

        # On GPUs, gloo beside nccl: CPU-offloaded shards (their gradient norm, checkpoint metadata) reduce on the host.
        init_process_group("cuda:nccl,cpu:gloo" if accelerator == "gpu" else "gloo", accelerator, timeout_s)

    def leave(self) -> None:
        from rlhf.engines.distributed import shutdown_distributed

        shutdown_distributed()

    def build_trained(
        self, load: ModelLoader, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int
    ) -> Any:
        from rlhf.engines.fsdp2.engine import FSDP2TrainEngine

        t = spec.trainer
        return FSDP2TrainEngine(
            load(t.precision),
            trainer=t,
            accelerator=spec.hardware.accelerator,
            lr=lr,
            total_steps=total_steps,
            grad_accum=grad_accum,
        )

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> Any:
        from rlhf.engines.fsdp2.engine import FSDP2FrozenEngine

        model = load(spec.trainer.precision)
        return FSDP2FrozenEngine(model, accelerator=spec.hardware.accelerator, offload=offload)

    def trained_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, trainable: int | None = None
    ) -> ModelStates:
        t = spec.trainer
        return memory.trained_states(
            params,
            largest_layer,
            dp,
            t.precision,
            reshard_after_forward=t.fsdp2.reshard_after_forward,
            cpu_offload=t.fsdp2.cpu_offload,
            trainable=trainable,
        )

    def frozen_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, offload: bool
    ) -> ModelStates:
        return memory.frozen_states(params, largest_layer, dp, spec.trainer.precision, offload)

    def gathers_on_every_rank(self, spec: ExperimentSpec) -> bool:
        return True


BACKEND = FSDP2Backend()
