"""Optimizer and learning-rate schedule from the trainer spec.

torch's AdamW is the default: DeepSpeed's FusedAdam and DeepSpeedCPUAdam compile on first use (about 50 s each on
the development CPU), so they are opt-in by ``trainer.optimizer``.
"""

from __future__ import annotations

import math

import torch

from rlhf.spec.schema import TrainerSpec

# Parameters that are never weight-decayed (OpenRLHF's get_optimizer_grouped_parameters).
_NO_DECAY = ("bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if any(k in name for k in _NO_DECAY) else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(
    model: torch.nn.Module,
    trainer: TrainerSpec,
    lr: float,
    *,
    offload: bool = False,
    name: str | None = None,
    sharded: bool = False,
):
    """``name`` (default ``trainer.optimizer``; rlhf.backends.train.deepspeed.ds_config.optimizer_name picks
    DeepSpeed's CPU Adam for
    offloaded states on GPUs). ``sharded``: the parameters are FSDP2's DTensor shards, which DeepSpeed's own
    optimizers cannot step: fused_adam is then torch's fused AdamW (on GPUs)."""
    groups = param_groups(model, trainer.weight_decay)
    betas = tuple(trainer.betas)
    name = name or trainer.optimizer
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=trainer.eps)
    if sharded and name == "fused_adam":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=trainer.eps, fused=torch.cuda.is_available())
    if sharded:
        raise ValueError(f"trainer.optimizer={name!r} cannot step sharded (fsdp2) parameters; use adamw")
    if name == "fused_adam":
        from deepspeed.ops.adam import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas, eps=trainer.eps)
    if name == "cpu_adam":
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(groups, lr=lr, betas=betas, eps=trainer.eps, adamw_mode=True)
    raise ValueError(f"trainer.optimizer={name!r}: must be adamw, fused_adam or cpu_adam")


def warmup_steps(trainer: TrainerSpec, total_steps: int) -> int:
    return math.ceil(total_steps * trainer.warmup_ratio)


def build_scheduler(optimizer, trainer: TrainerSpec, total_steps: int):
    """``trainer.lr_scheduler`` over ``total_steps`` optimizer steps, warmup = ceil(total x warmup_ratio)."""
    from transformers import get_scheduler

    total_steps = max(total_steps, 1)
    name = trainer.lr_scheduler
    if name == "cosine_with_min_lr":
        return get_scheduler(
            name,
            optimizer,
            num_warmup_steps=warmup_steps(trainer, total_steps),
            num_training_steps=total_steps,
            scheduler_specific_kwargs={"min_lr_rate": trainer.min_lr_ratio},
        )
    if name == "constant_with_warmup":
        return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps(trainer, total_steps))
    if name == "constant":
        return get_scheduler(name, optimizer)
    raise ValueError(f"trainer.lr_scheduler={name!r}: must be cosine_with_min_lr, constant_with_warmup or constant")


def set_peak_lr(optimizer, scheduler, lr: float) -> None:
    """The schedule's peak learning rate becomes ``lr`` from the next step on (its shape kept): the LambdaLR's base
    rates and every group's current rate at the schedule's present factor."""
    scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
    lambdas = getattr(scheduler, "lr_lambdas", None)
    for i, group in enumerate(optimizer.param_groups):
        group["initial_lr"] = lr
        factor = lambdas[i](scheduler.last_epoch) if lambdas else 1.0
        group["lr"] = lr * factor
