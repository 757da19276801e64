"""DeepSpeed config dicts for training and frozen (eval) engines, built from the spec's trainer section."""

from __future__ import annotations

from typing import Any

from rlhf.spec.schema import TrainerSpec

# DeepSpeed logs every N steps; we log ourselves.
_NEVER = 10**9


def _precision(precision: str) -> dict[str, Any]:
    return {"bf16": {"enabled": precision == "bf16"}, "fp16": {"enabled": precision == "fp16"}}


def _zero(stage: int, *, offload_optimizer: bool, offload_params: bool, accelerator: str) -> dict[str, Any]:
    zero: dict[str, Any] = {
        "stage": stage,
        "offload_optimizer": {"device": "cpu" if offload_optimizer else "none", "pin_memory": accelerator == "gpu"},
        "offload_param": {
            "device": "cpu" if offload_params and stage == 3 else "none",
            "pin_memory": accelerator == "gpu",
        },
    }
    if stage == 3 and accelerator == "cpu":
        # ZeRO-3 keeps parameters under 1e5 elements whole by default (machine.md); every tensor of a tiny CPU model
        # is that small, so partition everything there: the CPU runs then exercise the real ZeRO-3 gather paths.
        zero["stage3_param_persistence_threshold"] = 0
    return zero


def _cpu_optimizer_guard(accelerator: str) -> dict[str, Any]:
    """DeepSpeed refuses a client optimizer other than DeepSpeedCPUAdam under optimizer offload unless this guard is
    off. On GPUs it stays on (offloaded states are CPU tensors, which a fused CUDA Adam cannot step; the trainer
    builds DeepSpeedCPUAdam there, see :func:`optimizer_name`); on CPU every tensor is on the host anyway and torch's
    AdamW steps them without DeepSpeedCPUAdam's 50 s compile."""
    return {"zero_force_ds_cpu_optimizer": False} if accelerator == "cpu" else {}


def optimizer_name(trainer: TrainerSpec, accelerator: str) -> str:
    """The optimizer a trained role builds: DeepSpeed's CPU Adam whenever its states are offloaded on GPUs (what
    DeepSpeed's guard demands), else ``trainer.optimizer``."""
    if trainer.offload_optimizer and accelerator == "gpu":
        return "cpu_adam"
    return trainer.optimizer


def offloads_optimizer(ds_config: dict[str, Any]) -> bool:
    return ds_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def train_ds_config(
    trainer: TrainerSpec,
    *,
    micro_batch: int,
    grad_accum: int,
    dp_size: int,
    accelerator: str = "cpu",
) -> dict[str, Any]:
    """Config for a trained model: ZeRO stage, precision, offload, clipping, batch sizes (consistent by
    construction: train_batch = micro x grad_accum x dp)."""
    precision = _precision(trainer.precision)
    if trainer.on_nonfinite == "skip" and trainer.precision == "bf16":
        # DeepSpeed's ZeRO optimizer drops a step whose gradient norm is not finite: always for fp32 and fp16,
        # for bf16 only when asked to check.
        precision["bf16"]["check_grad_overflow"] = True
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch * grad_accum * dp_size,
        "gradient_clipping": trainer.max_norm,
        "zero_optimization": _zero(
            trainer.zero_stage,
            offload_optimizer=trainer.offload_optimizer,
            offload_params=trainer.offload_params,
            accelerator=accelerator,
        ),
        **precision,
        # torch AdamW (the CPU default) is not one of DeepSpeed's own optimizers: allow it with ZeRO.
        "zero_allow_untested_optimizer": True,
        **_cpu_optimizer_guard(accelerator),
        # Gradients accumulate in fp32 even when the model computes in bf16.
        "data_types": {"grad_accum_dtype": "fp32"},
        "steps_per_print": _NEVER,
        "wall_clock_breakdown": False,
    }


def eval_ds_config(
    *, zero_stage: int, precision: str, offload: bool = False, dp_size: int = 1, accelerator: str = "cpu"
) -> dict[str, Any]:
    """Config for a frozen model (reference, reward): ZeRO-3 if the trained models use stage 3 (so a large frozen
    model is sharded too), else stage 0; parameters optionally offloaded to host memory (ZeRO-3 only)."""
    stage = 3 if zero_stage == 3 else 0
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": dp_size,
        "zero_optimization": _zero(stage, offload_optimizer=False, offload_params=offload, accelerator=accelerator),
        **_precision(precision),
        "steps_per_print": _NEVER,
        "wall_clock_breakdown": False,
    }
