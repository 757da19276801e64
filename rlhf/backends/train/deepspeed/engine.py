"""DeepSpeed engines: :class:`DeepSpeedTrainEngine` for a trained model (policy, critic, SFT/RM/DPO model) and
:class:`DeepSpeedEvalEngine` for a frozen one (reference, reward model).

Both run inside one rank of a data-parallel group whose process group already exists (``init_distributed``). The
train engine implements the :class:`rlhf.backends.contract.training.TrainEngine` protocol: ``step`` runs exactly one
optimizer
step over the micro-batches it is given, normalising the loss over the whole step window (all micro-batches, all
ranks) as OpenRLHF does, so the gradient is that of one token mean no matter how tokens fall into micro-batches.

Sequence parallelism (``sequence_parallel`` > 1, the role's mesh): each micro-batch's forward and backward run inside
rlhf.models.sequence_parallel.runtime.splitting, so the model forwards split their rows over the rank's SP group;
DeepSpeed is given no mpu, so it counts every rank as data-parallel (its ``train_batch_size`` is the global batch
times the SP size, by construction of the config) and averages gradients over all of them: each rank's loss is
multiplied by the SP size (rlhf.backends.shared.step_window.sp_loss_scale), which makes that average the sum over
each SP group averaged over the DP groups. The gradient, its norm and the step are those of the unsplit run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from rlhf.backends.contract.training import LossFn
from rlhf.backends.shared import weights
from rlhf.backends.shared.distributed import (
    init_process_group,
    rng_file,
    rng_state,
    sequence_groups,
    set_rng_state,
    shutdown_distributed,
    to_device,
)
from rlhf.backends.shared.optim import build_optimizer, build_scheduler, set_peak_lr
from rlhf.backends.shared.step_window import MetricSums, sp_loss_scale, step_inputs
from rlhf.backends.train.deepspeed.ds_config import optimizer_name
from rlhf.models.sequence_parallel.runtime import splitting
from rlhf.spec.schema import TrainerSpec

log = logging.getLogger(__name__)

CKPT_TAG = "ds"  # DeepSpeed's sub-folder inside one of our checkpoint folders
# What DeepSpeed adds to the client state it returns from load_checkpoint (not ours to hand back).
_DS_CLIENT_KEYS = ("param_shapes", "frozen_param_shapes", "ds_config", "shared_params", "frozen_param_fragments")
__all__ = ["DeepSpeedEvalEngine", "DeepSpeedTrainEngine", "current_device", "init_distributed", "shutdown_distributed"]


def init_distributed(accelerator: str = "cpu", timeout_s: float = 600.0) -> None:
    """Join the role group's process group (rlhf.backends.shared.distributed: gloo on CPU, since DeepSpeed's CPU
    accelerator
    has no nccl; nccl on GPUs); DeepSpeed then adopts it."""
    from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed

    deepspeed = import_deepspeed()
    already = dist.is_initialized()
    backend = "nccl" if accelerator == "gpu" else "gloo"
    timeout = init_process_group(backend, accelerator, timeout_s)
    if not already:
        deepspeed.init_distributed(dist_backend=backend, timeout=timeout, verbose=False)


def current_device_kind() -> str:
    """ "gpu" or "cpu": the accelerator DeepSpeed picked in this process."""
    return "cpu" if current_device().type == "cpu" else "gpu"


def current_device() -> torch.device:
    from deepspeed.accelerator import get_accelerator

    return torch.device(get_accelerator().current_device_name())


class _EngineBase:
    engine: Any
    zero_stage: int
    sp_groups: Any = None  # rlhf.models.sequence_parallel.SPGroups with sequence parallelism, else None

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped model (HF or peft), for reading its config and calling helpers."""
        return self.engine.module

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def world_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def gathers_on_every_rank(self) -> bool:
        return self.zero_stage == 3

    def named_weights(self, keep: bool = True, adapter: bool = False) -> Iterator[tuple[str, Tensor]]:
        """Full weights under plain HF names (ZeRO-3 gathered, LoRA merged; ``adapter``: the LoRA adapters alone),
        for weight sync. Collective."""
        return weights.hf_weights(self.module, self.zero_stage == 3, keep, adapter=adapter)

    def weight_buckets(
        self, bucket_bytes: int, keep: bool = True, adapter: bool = False
    ) -> Iterator[list[tuple[str, Tensor]] | None]:
        """:func:`rlhf.backends.shared.weights.hf_weight_buckets` of this model (ZeRO-3: one bucket gathered at a time).
        Collective under ZeRO-3: every rank iterates; only ranks with ``keep`` get tensors."""
        return weights.hf_weight_buckets(self.module, self.zero_stage == 3, bucket_bytes, keep, adapter=adapter)

    def largest_weight_bytes(self) -> int:
        return weights.largest_weight_bytes(self.module)

    def trainable_params(self) -> int:
        return sum(weights.full_numel(p) for p in self.module.parameters() if p.requires_grad)

    def save_hf(self, path: str | os.PathLike, tokenizer=None, config_updates: dict[str, Any] | None = None) -> None:
        """A Hugging Face folder plain transformers loads (ZeRO-3 consolidated on rank 0); a peft model writes its
        adapters only (merge with ``python -m rlhf.models.merge_lora``). Collective: every rank must call it."""
        is_rank0 = self.rank == 0
        state = weights.state_dict_on_rank0(self.module, self.zero_stage == 3, is_rank0)
        try:
            if is_rank0:
                weights.write_hf_folder(self.module, state, path, tokenizer, config_updates)
        finally:  # the other ranks go on whether rank 0's write worked or not
            if dist.is_initialized():
                dist.barrier()


class DeepSpeedTrainEngine(_EngineBase):
    """A trained model: DeepSpeed engine + optimizer + LR schedule, one optimizer step per :meth:`step` call."""

    def __init__(
        self,
        model: torch.nn.Module,
        ds_config: dict[str, Any],
        *,
        trainer: TrainerSpec,
        lr: float,
        total_steps: int,
        sequence_parallel: int = 1,
    ) -> None:
        from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed

        deepspeed = import_deepspeed()
        self.sp_groups = sequence_groups(sequence_parallel)
        optimizer = build_optimizer(model, trainer, lr, name=optimizer_name(trainer, current_device_kind()))
        scheduler = build_scheduler(optimizer, trainer, total_steps)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config, dist_init_required=False
        )
        self.ds_config = ds_config
        self.grad_accum: int = ds_config["gradient_accumulation_steps"]
        self.zero_stage: int = ds_config["zero_optimization"]["stage"]
        self.device = current_device()
        self.global_step = 0

    def step(
        self,
        micro_batches: list[dict[str, Any]],
        loss_fn: LossFn,
        *,
        mask_key: str | None = "action_mask",
        norm_constant: float | None = None,
    ) -> dict[str, float]:
        """One optimizer step over the micro-batches given (the same count on every rank; ``grad_accum`` of them
        unless token-budget micro-batches vary it). ``loss_fn`` gets the step-window normaliser
        built from ``micro_batch[mask_key]`` of every micro-batch on every rank (``None`` when ``mask_key`` is None,
        for sequence-level losses). Returns the metrics averaged over micro-batches and ranks, plus ``grad_norm``
        (before clipping) and the ``lr`` the step used."""
        self.engine.train()
        batches, norm = step_inputs(micro_batches, self.device, mask_key, norm_constant, self.sp_groups)
        lr = float(self.optimizer.param_groups[0]["lr"])  # the rate this step uses (the scheduler moves on after it)
        metrics = MetricSums()
        n = len(batches)
        scale = sp_loss_scale(self.sp_groups)
        for i, mb in enumerate(batches):
            # The step's own micro-batch count, not the configured gradient_accumulation_steps (token-budget
            # micro-batches vary it): DeepSpeed's public override of its boundary, and the loss divided by n here.
            self.engine.set_gradient_accumulation_boundary(i == n - 1)
            with splitting(self.sp_groups):  # the forward and the backward (nothing without sequence parallelism)
                loss, m = loss_fn(self.engine, mb, norm)
                self.engine.backward((loss * scale if scale != 1 else loss) / n, scale_wrt_gas=False)
            self.engine.step()
            metrics.add(m)
        out = metrics.mean(self.device)
        grad_norm = self.engine.get_global_grad_norm()
        out["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["lr"] = lr
        self.global_step += 1
        return out

    def set_peak_lr(self, lr: float) -> None:
        """Change the schedule's peak learning rate from the next step on (the schedule's shape is kept)."""
        set_peak_lr(self.optimizer, self.scheduler, lr)

    @torch.no_grad()
    def forward_no_grad(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` in eval mode without gradients (e.g. the policy's old log-probs)."""
        self.engine.eval()
        try:
            with splitting(self.sp_groups):
                return fn(self.engine, to_device(batch, self.device))
        finally:
            self.engine.train()

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, client_state: dict[str, Any] | None = None) -> None:
        """DeepSpeed checkpoint (module, optimizer, scheduler) plus this rank's RNG state into ``path``. Collective."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        client = dict(client_state or {})
        client["engine_global_step"] = self.global_step
        self.engine.save_checkpoint(str(path), tag=CKPT_TAG, client_state=client, save_latest=False)
        torch.save(rng_state(), rng_file(path, self.rank))

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns the client state. Collective."""
        path = Path(path)
        load_path, client = self.engine.load_checkpoint(
            str(path), tag=CKPT_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {path / CKPT_TAG}")
        rng = rng_file(path, self.rank)
        if rng.is_file():
            set_rng_state(torch.load(rng, weights_only=False))
        client = {k: v for k, v in (client or {}).items() if k not in _DS_CLIENT_KEYS}
        self.global_step = int(client.get("engine_global_step", 0))
        return client

    # -- memory --------------------------------------------------------------------------------------------------
    def offload_states(self) -> None:
        """Move the optimizer states, fp32 master weights and gradients to host memory while the rollout engines
        generate on the same devices, whatever the ZeRO stage (DeepSpeed > 0.17.5 offloads stages 1-3); the 16-bit
        weights stay (the plan counts them in the generation phase), the allocator's cache is emptied after. The
        state types are OpenRLHF's offload_deepspeed_states'. No-op on CPU."""
        if self.device.type == "cpu":
            return
        from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum, OffloadStateTypeEnum

        kinds = [
            OffloadStateTypeEnum.optim_states,
            OffloadStateTypeEnum.contiguous_grad_buffer,
            OffloadStateTypeEnum.hp_params,
            OffloadStateTypeEnum.lp_grads,
        ]
        self.engine.offload_states(include=kinds, device=OffloadDeviceEnum.cpu, pin_memory=True, non_blocking=True)
        if self.zero_stage == 3:
            self.engine.empty_partition_cache()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def reload_states(self) -> None:
        if self.device.type == "cpu":
            return
        self.engine.reload_states(non_blocking=True)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


class DeepSpeedEvalEngine(_EngineBase):
    """A frozen model under DeepSpeed (ZeRO-3 sharded when the trainer uses stage 3, else stage 0)."""

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any], *, sequence_parallel: int = 1) -> None:
        from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed

        deepspeed = import_deepspeed()
        self.sp_groups = sequence_groups(sequence_parallel)

        model.requires_grad_(False)
        self.engine, *_ = deepspeed.initialize(model=model, config=ds_config, dist_init_required=False)
        self.engine.eval()
        self.zero_stage: int = ds_config["zero_optimization"]["stage"]
        self.device = current_device()

    @torch.no_grad()
    def forward(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` without gradients, batch moved to this rank's device (its rows split over the SP group
        with sequence parallelism)."""
        with splitting(self.sp_groups):
            return fn(self.engine, to_device(batch, self.device))

    def offload_states(self) -> None:  # frozen weights are offloaded by ZeRO-3's offload_param, if configured
        return None

    def reload_states(self) -> None:
        return None
