"""``trainer.backend=fsdp2`` as rlhf.backends.contract.training.TrainBackend: no torch import (plan and validation use
it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.backends.contract.training import (
    ModelLoader,
    ModelStates,
    Network,
    SavedWeights,
    TrainBackendBase,
    TrainTraffic,
)
from rlhf.backends.train.fsdp2 import memory
from rlhf.spec.schema import ExperimentSpec

Problem = tuple[str, Any, str]


class FSDP2Backend(TrainBackendBase):
    splits_sequences = True  # trainer.sequence_parallel_size: rlhf.models.sequence_parallel in its engines
    name = "fsdp2"

    def describe(self, spec: ExperimentSpec) -> str:
        t, f = spec.trainer, spec.trainer.fsdp2
        compute = "bf16 compute over fp32 shards, fp32 gradient reduce" if t.precision == "bf16" else t.precision
        reshard = "resharded after forward" if f.reshard_after_forward else "kept gathered from forward to backward"
        offload = ", shards and optimizer step in host memory (CPUOffloadPolicy)" if f.cpu_offload else ""
        return f"fsdp2 (fully_shard per decoder layer), {compute}, units {reshard}{offload}; frozen models sharded"

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        from rlhf.backends.shared.distributed import init_process_group

        # On GPUs, gloo beside nccl: CPU-offloaded shards (their gradient norm, checkpoint metadata) reduce on the host.
        init_process_group("cuda:nccl,cpu:gloo" if accelerator == "gpu" else "gloo", accelerator, timeout_s)

    def build_trained(
        self, load: ModelLoader, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int
    ) -> Any:
        from rlhf.backends.shared.distributed import world_size
        from rlhf.backends.train.fsdp2.engine import FSDP2TrainEngine

        t = spec.trainer
        return FSDP2TrainEngine(
            load(t.precision),
            trainer=t,
            accelerator=spec.hardware.accelerator,
            lr=lr,
            total_steps=total_steps,
            grad_accum=grad_accum,
            sequence_parallel=self.mesh(spec, world_size()).sequence,
        )

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> Any:
        from rlhf.backends.shared.distributed import world_size
        from rlhf.backends.train.fsdp2.engine import FSDP2FrozenEngine

        model = load(spec.trainer.precision)
        sp = self.mesh(spec, world_size()).sequence
        return FSDP2FrozenEngine(model, accelerator=spec.hardware.accelerator, offload=offload, sequence_parallel=sp)

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

    def shards_optimizer_states(self, spec: ExperimentSpec) -> bool:
        return True

    def gathered_units(self, spec: ExperimentSpec) -> int:
        """One gather per unit: each decoder layer, each untied embedding, the root
        (rlhf.backends.train.fsdp2.engine)."""
        m = spec.model
        return m.num_layers + (1 if m.tie_word_embeddings else 2) + 1

    def module_cost(self, constants: Any) -> Any:
        return constants.fsdp2_unit

    def traffic(
        self,
        spec: ExperimentSpec,
        net: Network,
        *,
        ranks: int,
        link: float,
        weight_bytes: float,
        grad_bytes: float,
        trained: float,
        units: int,
        buckets: int,
        hidden: float,
        gpu: bool,
    ) -> TrainTraffic:
        """Each unit gathered in forward and backward (and to recompute; once less when kept gathered from forward
        to backward), the ``trained`` parameters' gradients reduce-scattered in fp32."""
        t = spec.trainer
        gathers = (3 if t.gradient_checkpointing else 2) - (0 if t.fsdp2.reshard_after_forward else 1)
        per_mb = hidden * (gathers * net.ring(weight_bytes, ranks, link) + net.ring(trained * 4, ranks, link))
        per_mb += net.calls((gathers + 1) * units, ranks)
        return TrainTraffic(per_mb, 0.0, t.fsdp2.cpu_offload and gpu)

    def offloads_frozen(self, spec: ExperimentSpec) -> bool:
        return True

    def auto_defaults(self) -> dict[str, Any]:
        return {"trainer.fsdp2.reshard_after_forward": True, "trainer.fsdp2.cpu_offload": False}

    def auto_options(self, spec: ExperimentSpec, *, gpu: bool, turns: bool, lora: bool) -> list[dict[str, Any]]:
        """Resharded after forward or kept gathered, and CPU offload on GPUs; none in fp16 or with DeepSpeed's CPU
        Adam (FSDP2 has neither). ``trainer.zero_stage`` stays the recipe's (FSDP2 does not read it)."""
        if spec.trainer.precision == "fp16" or spec.trainer.optimizer == "cpu_adam":
            return []
        keep = {"trainer.zero_stage": spec.trainer.zero_stage}
        out = [dict(keep), {**keep, "trainer.fsdp2.reshard_after_forward": False}]
        if gpu:
            out.append({**keep, "trainer.fsdp2.cpu_offload": True})
        return out

    def label(self, spec: ExperimentSpec) -> str:
        f = spec.trainer.fsdp2
        out = "fsdp2" + ("" if f.reshard_after_forward else " keep-gathered")
        return out + (" cpu-offload" if f.cpu_offload else "")

    # -- its rules (rlhf.spec.train_backend_rules asks them) --
    def problems(self, spec: ExperimentSpec, d: Any) -> list[Problem]:
        t, out = spec.trainer, []
        if t.precision == "fp16":
            out.append(("trainer.precision", "fp16", "fsdp2 trains in bf16 or fp32 (no loss scaling); use bf16"))
        if t.optimizer == "cpu_adam":
            out.append(
                (
                    "trainer.optimizer",
                    "cpu_adam",
                    "DeepSpeed's CPU Adam cannot step FSDP2's sharded parameters; use adamw (with "
                    "trainer.fsdp2.cpu_offload=true the step runs in host memory)",
                )
            )
        for name in ("offload_optimizer", "offload_params"):
            if getattr(t, name):
                out.append(
                    (
                        f"trainer.{name}",
                        True,
                        "a DeepSpeed key; under trainer.backend=fsdp2 use trainer.fsdp2.cpu_offload=true (parameters, "
                        "gradients and the optimizer step in host memory)",
                    )
                )
        return out

    def weights_split(self, spec: ExperimentSpec) -> Problem | None:
        return ("trainer.backend", "fsdp2", "fsdp2")  # fully_shard always splits them

    # -- its checkpoints (rlhf.backends.train.fsdp2.checkpoint: the layout) --
    def checkpoint_weights(self, folder: Path) -> SavedWeights:
        from rlhf.backends.train.fsdp2 import checkpoint

        return checkpoint.checkpoint_weights(folder)

    def checkpoint_state_dict(self, folder: Path) -> dict[str, Any]:
        from rlhf.backends.train.fsdp2 import checkpoint

        return checkpoint.checkpoint_state_dict(folder)


BACKEND = FSDP2Backend()
