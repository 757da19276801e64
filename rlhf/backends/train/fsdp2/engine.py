"""FSDP2 engines: :class:`FSDP2TrainEngine` for a trained model, :class:`FSDP2FrozenEngine` for a frozen one.

Sharding: ``fully_shard`` on each decoder layer (the classes the model names in ``_no_split_modules``), on each untied
input/output embedding, then on the root, over a 1-D device mesh of the role's ranks. A trained model keeps fp32
shards (with trainer.precision=bf16 it is loaded in bf16 and its shards upcast: the master weights), and its
MixedPrecisionPolicy gathers units in bf16 and reduce-scatters gradients in fp32. ``trainer.fsdp2.cpu_offload``
adds a CPUOffloadPolicy (shards, gradients and the optimizer step on the host).

The step matches DeepSpeed's (rlhf.backends.train.deepspeed.engine) term for term: each micro-batch's loss divided by
the
gradient-accumulation count, gradients averaged over the ranks by the reduce-scatter, the norm taken before clipping,
clipping to ``trainer.max_norm``, one optimizer and schedule step; a non-finite norm drops the update.

Sequence parallelism (``sequence_parallel`` > 1, the role's mesh): the units stay sharded over the whole role group,
each micro-batch's forward and backward run inside rlhf.models.sequence_parallel.runtime.splitting (the model
forwards split their rows over the rank's SP group), and each rank's loss is multiplied by the SP size
(rlhf.backends.shared.step_window.sp_loss_scale): the reduce-scatter's average over every rank is then the sum over
each SP group averaged over the DP groups, the gradient of the unsplit run.

Checkpoints: ``torch.distributed.checkpoint`` of the sharded model and optimizer state (each rank writes its shards)
under ``fsdp2/``, the schedule and client state from rank 0, each rank's RNG state; loading continues bit-exactly.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from rlhf.backends.contract.training import LossFn
from rlhf.backends.shared import weights
from rlhf.backends.shared.distributed import (
    accelerator_device,
    barrier,
    rank,
    rng_file,
    rng_state,
    sequence_groups,
    set_rng_state,
    to_device,
    world_size,
)
from rlhf.backends.shared.optim import build_optimizer, build_scheduler, set_peak_lr
from rlhf.backends.shared.step_window import MetricSums, sp_loss_scale, step_inputs
from rlhf.models.loading import torch_dtype
from rlhf.models.sequence_parallel.runtime import splitting
from rlhf.spec.schema import TrainerSpec

CKPT_DIR = "fsdp2"  # torch.distributed.checkpoint folder inside one of our checkpoint folders
STATE_FILE = "engine_state.pt"  # schedule, step count and client state (rank 0 writes, every rank reads)


def device_mesh(accelerator: str):
    """A 1-D mesh over every rank of the role group: CUDA devices on GPUs, the CPU (gloo) otherwise."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cuda" if accelerator == "gpu" else "cpu", (world_size(),))


def _units(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """(untied embeddings, decoder layers) of a HF or peft model: the modules that become FSDP units."""
    from rlhf.models.lora import is_peft_model

    base = model.get_base_model() if is_peft_model(model) else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"trainer.backend=fsdp2: {type(base).__name__} names no decoder layer class (its _no_split_modules), so "
            "there is nothing to shard layer by layer; use trainer.backend=deepspeed for this model"
        )
    embeddings: list[nn.Module] = []
    if not getattr(base.config, "tie_word_embeddings", False):  # a tied pair shares one parameter: leave it to root
        getters = (base.get_input_embeddings, getattr(base, "get_output_embeddings", lambda: None))
        embeddings = [e for e in (g() for g in getters) if isinstance(e, nn.Module)]
    return embeddings, layers


def shard_model(
    model: nn.Module,
    accelerator: str,
    *,
    mp: MixedPrecisionPolicy,
    offload: bool,
    reshard_after_forward: bool,
) -> None:
    """``fully_shard`` the model's units, then its root, in place (the parameters become DTensor shards on this
    rank's device, or on the host with ``offload``)."""
    mesh = device_mesh(accelerator)
    policy = CPUOffloadPolicy(pin_memory=accelerator == "gpu") if offload else OffloadPolicy()
    embeddings, layers = _units(model)
    for unit in [*embeddings, *layers, model]:
        fully_shard(unit, mesh=mesh, mp_policy=mp, offload_policy=policy, reshard_after_forward=reshard_after_forward)


def reshard_all(model: nn.Module) -> None:
    """Free every gathered unit (the root keeps its gathered parameters after a forward, as do all units with
    reshard_after_forward=false, until a backward)."""
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def _optimizer_to(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for k, v in state.items():
            if isinstance(v, Tensor) and k != "step":
                state[k] = v.to(device, non_blocking=True)


class FSDP2TrainEngine:
    """A trained model under FSDP2 with its optimizer and LR schedule, one optimizer step per :meth:`step` call
    (implements rlhf.backends.contract.training.TrainEngine)."""

    gathers_on_every_rank = True

    def __init__(
        self,
        model: nn.Module,
        *,
        trainer: TrainerSpec,
        accelerator: str,
        lr: float,
        total_steps: int,
        grad_accum: int,
        sequence_parallel: int = 1,
    ) -> None:
        self.trainer = trainer
        self.sp_groups = sequence_groups(sequence_parallel)
        self.grad_accum = grad_accum
        self.global_step = 0
        self.device = accelerator_device(accelerator)
        self.compute_dtype = torch_dtype(trainer.precision)
        self.cpu_offload = trainer.fsdp2.cpu_offload
        self.reshard_after_forward = trainer.fsdp2.reshard_after_forward
        mixed = trainer.precision == "bf16"
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else None
        shard_model(
            model,
            accelerator,
            mp=mp or MixedPrecisionPolicy(),
            offload=self.cpu_offload,
            reshard_after_forward=self.reshard_after_forward,
        )
        if mixed:
            # Loaded in bf16 (each rank holds the whole model on the host only that long); the shards become the fp32
            # master weights, as DeepSpeed's fp32 copies of a bf16 model.
            model.to(torch.float32)
        self.model = model
        self.optimizer = build_optimizer(model, trainer, lr, sharded=True)
        self.scheduler = build_scheduler(self.optimizer, trainer, total_steps)
        self._trained = [p for p in model.parameters() if p.requires_grad]

    @property
    def module(self) -> nn.Module:
        return self.model

    # -- training ------------------------------------------------------------------------------------------------
    def step(
        self,
        micro_batches: list[dict[str, Any]],
        loss_fn: LossFn,
        *,
        mask_key: str | None = "action_mask",
        norm_constant: float | None = None,
    ) -> dict[str, float]:
        """One optimizer step over the micro-batches given, the same count on every rank (see TrainEngine.step)."""
        self.model.train()
        batches, norm = step_inputs(micro_batches, self.device, mask_key, norm_constant, self.sp_groups)
        lr = float(self.optimizer.param_groups[0]["lr"])  # the rate this step uses (the scheduler moves on after it)
        metrics = MetricSums()
        scale = sp_loss_scale(self.sp_groups)
        for mb in batches:
            with splitting(self.sp_groups):  # the forward and the backward (nothing without sequence parallelism)
                loss, m = loss_fn(self.model, mb, norm)
                # the step's micro-batch count, as the DeepSpeed engine divides
                ((loss * scale if scale != 1 else loss) / len(batches)).backward()
            metrics.add(m)
        grad_norm = self._clip()
        if math.isfinite(grad_norm):  # a non-finite norm drops the update (and the schedule's step), as DeepSpeed does
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        out = metrics.mean(self.device)
        out["grad_norm"] = grad_norm
        out["lr"] = lr
        self.global_step += 1
        return out

    def _clip(self) -> float:
        """The gradients' global norm (before clipping; every rank gets the same), clipped to trainer.max_norm."""
        grads = [p.grad for p in self._trained if p.grad is not None]
        if not grads:
            return 0.0
        total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)  # a DTensor: the shards' partial norms
        value = float(total.full_tensor() if isinstance(total, DTensor) else total)
        if self.trainer.max_norm > 0 and math.isfinite(value):
            torch.nn.utils.clip_grads_with_norm_(self._trained, self.trainer.max_norm, total)
        return value

    def set_peak_lr(self, lr: float) -> None:
        set_peak_lr(self.optimizer, self.scheduler, lr)

    @torch.no_grad()
    def forward_no_grad(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` in eval mode without gradients; the gathered units are freed afterwards."""
        self.model.eval()
        try:
            with splitting(self.sp_groups):
                return fn(self.model, to_device(batch, self.device))
        finally:
            reshard_all(self.model)
            self.model.train()

    # -- weights -------------------------------------------------------------------------------------------------
    def _sync_to(self) -> dict[str, Any]:
        # The rollout engines run in the training precision on this rank's device (fp32 shards cast per tensor).
        return {"device": self.device, "dtype": self.compute_dtype}

    def named_weights(self, keep: bool = True, adapter: bool = False) -> Iterator[tuple[str, Tensor]]:
        reshard_all(self.model)
        return weights.hf_weights(self.model, False, keep, to=self._sync_to(), adapter=adapter)

    def weight_buckets(
        self, bucket_bytes: int, keep: bool = True, adapter: bool = False
    ) -> Iterator[list[tuple[str, Tensor]] | None]:
        """Buckets of full HF-named weights (``adapter``: the LoRA adapters alone), each DTensor gathered
        (``full_tensor``) when its bucket is reached, so no rank holds more than one bucket; every rank must
        iterate."""
        reshard_all(self.model)
        return weights.hf_weight_buckets(self.model, False, bucket_bytes, keep, to=self._sync_to(), adapter=adapter)

    def largest_weight_bytes(self) -> int:
        return weights.largest_weight_bytes(self.model, self.compute_dtype)

    def trainable_params(self) -> int:
        return sum(p.numel() for p in self._trained)

    def save_hf(self, path: str | os.PathLike, tokenizer=None, config_updates: dict[str, Any] | None = None) -> None:
        """A Hugging Face folder in the training precision, gathered one tensor at a time into rank 0's host memory
        (as DeepSpeed's export); a peft model writes its adapters only. Collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        reshard_all(self.model)
        state = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank() == 0:
            dtype = self.compute_dtype
            state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
            weights.write_hf_folder(self.model, state, path, tokenizer, {"dtype": dtype, **(config_updates or {})})
        barrier()

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, client_state: dict[str, Any] | None = None) -> None:
        """Sharded model and optimizer state (torch.distributed.checkpoint), schedule, client state and this rank's
        RNG state into ``path``. Collective."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        reshard_all(self.model)
        # An optimizer that has not stepped yet has no state; asking for it would initialise it (with a zero step),
        # which would change the next real step: save the model alone then.
        has_optim = bool(self.optimizer.state)
        if has_optim:
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
            state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        else:
            state = {"model": get_model_state_dict(self.model)}
        dcp.save(state, checkpoint_id=str(path / CKPT_DIR))
        if rank() == 0:
            engine = {
                "scheduler": self.scheduler.state_dict(),
                "client": dict(client_state or {}),
                "global_step": self.global_step,
                "optimizer_saved": has_optim,
            }
            torch.save(engine, path / STATE_FILE)
        torch.save(rng_state(), rng_file(path, rank()))
        barrier()

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns the client state. Collective."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_state_dict,
            set_model_state_dict,
            set_state_dict,
        )

        path = Path(path)
        if not (path / CKPT_DIR / ".metadata").is_file() or not (path / STATE_FILE).is_file():
            raise FileNotFoundError(f"no FSDP2 checkpoint under {path} (need {CKPT_DIR}/.metadata and {STATE_FILE})")
        engine = torch.load(path / STATE_FILE, weights_only=False)
        reshard_all(self.model)
        if engine["optimizer_saved"]:
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
            state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, checkpoint_id=str(path / CKPT_DIR))
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        else:
            state = {"model": get_model_state_dict(self.model)}
            dcp.load(state, checkpoint_id=str(path / CKPT_DIR))
            set_model_state_dict(self.model, state["model"])
        self.scheduler.load_state_dict(engine["scheduler"])
        self.global_step = int(engine["global_step"])
        rng = rng_file(path, rank())
        if rng.is_file():
            set_rng_state(torch.load(rng, weights_only=False))
        barrier()
        return dict(engine["client"])

    # -- memory --------------------------------------------------------------------------------------------------
    def offload_states(self) -> None:
        """Shards and optimizer states to host memory while a colocated rollout engine generates (GPUs; nothing to
        do on CPU or when the CPUOffloadPolicy keeps them there anyway)."""
        if self.device.type == "cpu" or self.cpu_offload:
            return
        reshard_all(self.model)
        self.model.to("cpu")  # FSDP2's module .to() moves the shards and keeps its own references to them
        _optimizer_to(self.optimizer, torch.device("cpu"))
        torch.cuda.empty_cache()

    def reload_states(self) -> None:
        if self.device.type == "cpu" or self.cpu_offload:
            return
        self.model.to(self.device)
        _optimizer_to(self.optimizer, self.device)


class FSDP2FrozenEngine:
    """A frozen model sharded like a trained one, in the training precision; ``offload`` keeps its shards in host
    memory (each unit gathered to the device for its forward). Implements
    rlhf.backends.contract.training.FrozenEngine."""

    gathers_on_every_rank = True

    def __init__(
        self, model: nn.Module, *, accelerator: str, offload: bool = False, sequence_parallel: int = 1
    ) -> None:
        self.sp_groups = sequence_groups(sequence_parallel)
        model.requires_grad_(False)
        self.device = accelerator_device(accelerator)
        shard_model(model, accelerator, mp=MixedPrecisionPolicy(), offload=offload, reshard_after_forward=True)
        model.eval()
        self.model = model

    @property
    def module(self) -> nn.Module:
        return self.model

    @torch.no_grad()
    def forward(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        try:
            with splitting(self.sp_groups):
                return fn(self.model, to_device(batch, self.device))
        finally:
            reshard_all(self.model)  # the root keeps its gathered parameters after a forward otherwise

    def offload_states(self) -> None:  # frozen shards are offloaded by the CPUOffloadPolicy, when asked for
        return None

    def reload_states(self) -> None:
        return None
