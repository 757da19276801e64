"""DeepSpeed engines: :class:`DeepSpeedTrainEngine` for a trained model (policy, critic, SFT/RM/DPO model) and
:class:`DeepSpeedEvalEngine` for a frozen one (reference, reward model).

Both run inside one rank of a data-parallel group whose process group already exists (``init_distributed``). The
train engine implements the :class:`rlhf.engines.protocol.TrainEngine` protocol: ``step`` runs exactly one optimizer
step over the micro-batches it is given, normalising the loss over the whole step window (all micro-batches, all
ranks) as OpenRLHF does, so the gradient is that of one token mean no matter how tokens fall into micro-batches.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from rlhf.algo import LossNormalizer, step_loss_normalizer
from rlhf.engines import weights
from rlhf.engines.ds_config import optimizer_name
from rlhf.engines.optim import build_optimizer, build_scheduler
from rlhf.spec.schema import TrainerSpec

log = logging.getLogger(__name__)

# loss_fn(model, micro_batch, normalizer) -> (scalar loss to backpropagate, {metric: value}); ``model`` is callable
# like the HF module (the DeepSpeed engine forwards to it).
LossFn = Callable[[Any, dict[str, Any], LossNormalizer | None], tuple[Tensor, dict[str, float | Tensor]]]

CKPT_TAG = "ds"  # DeepSpeed's sub-folder inside one of our checkpoint folders


def _rendezvous_store(timeout: Any) -> Any:
    """The group's TCPStore, hosted by rank 0 on a socket bound to MASTER_ADDR itself: torch's env:// rendezvous
    would listen on every interface (the store's server binds the wildcard address), and we keep each socket on the
    address it serves (loopback on a local cluster, the node's own address on a real one)."""
    import socket

    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if rank != 0:
        return dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return dist.TCPStore(
        host, port, world, is_master=True, timeout=timeout, wait_for_workers=False, master_listen_fd=sock.detach()
    )


def init_distributed(accelerator: str = "cpu", timeout_s: float = 600.0) -> None:
    """Join the process group described by RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (set by the role group):
    gloo on CPU (DeepSpeed's CPU accelerator has no nccl), nccl on GPUs. The group is formed on our own store (see
    :func:`_rendezvous_store`); DeepSpeed then adopts it."""
    import datetime

    from rlhf.engines.deepspeed_import import import_deepspeed

    deepspeed = import_deepspeed()
    if dist.is_initialized():
        return
    backend = "nccl" if accelerator == "gpu" else "gloo"
    if accelerator == "gpu":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1))
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend,
        store=_rendezvous_store(timeout),
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        timeout=timeout,
    )
    deepspeed.init_distributed(dist_backend=backend, timeout=timeout, verbose=False)


def shutdown_distributed() -> None:
    """Leave the process group; without it rank 0 aborts at exit (machine.md)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def current_device_kind() -> str:
    """"gpu" or "cpu": the accelerator DeepSpeed picked in this process."""
    return "cpu" if current_device().type == "cpu" else "gpu"


def current_device() -> torch.device:
    from deepspeed.accelerator import get_accelerator

    return torch.device(get_accelerator().current_device_name())


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v for k, v in batch.items()}


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the data-parallel ranks (keys sorted so every rank packs the same order)."""
    if not dist.is_initialized() or dist.get_world_size() == 1 or not metrics:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.to(current_device())
    dist.all_reduce(t)
    t = t.cpu() / dist.get_world_size()
    return dict(zip(keys, t.tolist(), strict=True))


def _rng_state() -> dict[str, Any]:
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _EngineBase:
    engine: Any
    zero_stage: int

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

    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """Full weights under plain HF names (ZeRO-3 gathered, LoRA merged), for weight sync. Collective."""
        return weights.hf_weights(self.module, self.zero_stage == 3)

    def weight_buckets(self, bucket_bytes: int, keep: bool = True) -> Iterator[list[tuple[str, Tensor]] | None]:
        """:func:`rlhf.engines.weights.hf_weight_buckets` of this model (ZeRO-3: one bucket gathered at a time).
        Collective under ZeRO-3: every rank iterates; only ranks with ``keep`` get tensors."""
        return weights.hf_weight_buckets(self.module, self.zero_stage == 3, bucket_bytes, keep)

    def largest_weight_bytes(self) -> int:
        return weights.largest_weight_bytes(self.module)

    def save_hf(self, path: str | os.PathLike, tokenizer=None, config_updates: dict[str, Any] | None = None) -> None:
        """A Hugging Face folder plain transformers loads (ZeRO-3 consolidated on rank 0); a peft model writes its
        adapters only (merge with ``python -m rlhf.models.merge_lora``). Collective: every rank must call it."""
        is_rank0 = self.rank == 0
        state = weights.state_dict_on_rank0(self.module, self.zero_stage == 3, is_rank0)
        if is_rank0:
            module = self.module
            config = getattr(module, "config", None)
            for key, value in (config_updates or {}).items():
                setattr(config, key, value)
            Path(path).mkdir(parents=True, exist_ok=True)
            module.save_pretrained(str(path), state_dict=state, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(path))
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
    ) -> None:
        from rlhf.engines.deepspeed_import import import_deepspeed

        deepspeed = import_deepspeed()
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
        """One optimizer step over exactly ``grad_accum`` micro-batches. ``loss_fn`` gets the step-window normaliser
        built from ``micro_batch[mask_key]`` of every micro-batch on every rank (``None`` when ``mask_key`` is None,
        for sequence-level losses). Returns the metrics averaged over micro-batches and ranks, plus ``grad_norm``
        (before clipping) and the ``lr`` the step used."""
        if len(micro_batches) != self.grad_accum:
            raise ValueError(
                f"an optimizer step takes {self.grad_accum} micro-batches per rank (gradient accumulation derived "
                f"from trainer.global_batch), got {len(micro_batches)}"
            )
        self.engine.train()
        batches = [to_device(mb, self.device) for mb in micro_batches]
        norm = None
        if mask_key is not None:
            norm = step_loss_normalizer(
                [b[mask_key] for b in batches],
                dp_size=self.world_size,
                grad_accum_steps=self.grad_accum,
                all_reduce=dist.all_reduce if self.world_size > 1 else None,
                constant=norm_constant,
            )
        lr = float(self.optimizer.param_groups[0]["lr"])  # the rate this step uses (the scheduler moves on after it)
        sums: dict[str, float] = {}
        for mb in batches:
            loss, metrics = loss_fn(self.engine, mb, norm)
            self.engine.backward(loss)
            self.engine.step()
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        out = mean_over_ranks({k: v / len(batches) for k, v in sums.items()})
        grad_norm = self.engine.get_global_grad_norm()
        out["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["lr"] = lr
        self.global_step += 1
        return out

    def set_peak_lr(self, lr: float) -> None:
        """Change the schedule's peak learning rate from the next step on (the schedule's shape is kept)."""
        sched = self.scheduler
        sched.base_lrs = [lr for _ in sched.base_lrs]
        lambdas = getattr(sched, "lr_lambdas", None)
        for i, group in enumerate(self.optimizer.param_groups):
            group["initial_lr"] = lr
            factor = lambdas[i](sched.last_epoch) if lambdas else 1.0
            group["lr"] = lr * factor

    @torch.no_grad()
    def forward_no_grad(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` in eval mode without gradients (e.g. the policy's old log-probs)."""
        self.engine.eval()
        try:
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
        torch.save(_rng_state(), path / f"rng_rank{self.rank}.pt")

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns the client state. Collective."""
        path = Path(path)
        load_path, client = self.engine.load_checkpoint(
            str(path), tag=CKPT_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {path / CKPT_TAG}")
        rng = path / f"rng_rank{self.rank}.pt"
        if rng.is_file():
            _set_rng_state(torch.load(rng, weights_only=False))
        client = client or {}
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

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any]) -> None:
        from rlhf.engines.deepspeed_import import import_deepspeed

        deepspeed = import_deepspeed()

        model.requires_grad_(False)
        self.engine, *_ = deepspeed.initialize(model=model, config=ds_config, dist_init_required=False)
        self.engine.eval()
        self.zero_stage: int = ds_config["zero_optimization"]["stage"]
        self.device = current_device()

    @torch.no_grad()
    def forward(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` without gradients, batch moved to this rank's device."""
        return fn(self.engine, to_device(batch, self.device))

    def offload_states(self) -> None:  # frozen weights are offloaded by ZeRO-3's offload_param, if configured
        return None

    def reload_states(self) -> None:
        return None
