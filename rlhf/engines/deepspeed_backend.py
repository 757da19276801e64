"""``trainer.backend=deepspeed``: the :class:`rlhf.engines.training.TrainBackend` of DeepSpeed ZeRO 0-3.

Its keys are the trainer section's own (``trainer.zero_stage``, ``offload_optimizer``, ``offload_params``); the
engines are in ``deepspeed_engine`` and their configs in ``ds_config`` (imported when an engine is built: this module
imports no torch, the plan uses it).

Memory per device, DeepSpeed's own accounting (P parameters, N data-parallel ranks):
    mixed precision (bf16/fp16): 2 (16-bit weights) + 2 (16-bit grads) + 4 (fp32 grads) + 4 (fp32 master) + 8 (Adam)
    fp32:                       4 (weights) + 4 (grads) + 8 (Adam)
    ZeRO-1 partitions master + Adam (/N), ZeRO-2 also the gradients, ZeRO-3 also the weights (+ 4 bytes x the largest
    layer, the gathered-parameter buffer; no separate 16-bit gradient partition, so 18 bytes per parameter / N).
    offload_optimizer moves master, fp32 grads and Adam to host memory; offload_params (ZeRO-3) the weights too.
    LoRA: the base weights frozen (weights only), the adapters trained in full.
    This is what deepspeed's estimate_zero{2,3}_model_states_mem_needs compute (tests/launch/test_plan.py compares).
Frozen models: weights only, sharded /N under ZeRO-3 (when the trained models use stage 3), 0 when offloaded.
"""

from __future__ import annotations

from typing import Any

from rlhf.engines.training import ModelLoader, ModelStates
from rlhf.spec.schema import ExperimentSpec


def trained_states(
    params: int,
    largest_layer: int,
    dp: int,
    zero_stage: int,
    precision: str,
    offload_optimizer: bool = False,
    offload_params: bool = False,
    trainable: int | None = None,
) -> ModelStates:
    """Model states of a DeepSpeed-trained role per device (see the module docstring)."""
    trainable = params if trainable is None else trainable  # LoRA: only the adapters have grads and Adam states
    mixed = precision in ("bf16", "fp16")
    w_b, g_b = (2, 2) if mixed else (4, 4)
    opt_b = (4 + 4 + 8) if mixed else 8  # fp32 grads + master + Adam, or Adam alone
    weights = (params * w_b) / (dp if zero_stage >= 3 else 1)
    if zero_stage >= 3:
        weights += 4 * largest_layer
    grads = trainable * g_b / (dp if zero_stage >= 2 else 1)
    if zero_stage >= 3 and mixed:
        # ZeRO-3 reduce-scatters 16-bit gradients straight into the fp32 gradient partition (counted in optimizer).
        grads = 0.0
    optimizer = trainable * opt_b / (dp if zero_stage >= 1 else 1)
    host = 0.0
    if offload_optimizer:
        host += optimizer
        optimizer = 0.0
        if mixed:  # DeepSpeed keeps the 16-bit gradients on the host side of the CPU optimizer as well
            host += grads
            grads = 0.0
    if offload_params and zero_stage >= 3:
        host += weights - 4 * largest_layer
        weights = 4 * largest_layer
    return ModelStates(weights=weights, grads=grads, optimizer=optimizer, host=host)


def frozen_states(params: int, dp: int, zero_stage: int, precision: str, offload: bool) -> ModelStates:
    w_b = 2 if precision in ("bf16", "fp16") else 4
    weights = params * w_b / (dp if zero_stage >= 3 else 1)
    return ModelStates(weights=0.0, host=weights) if offload else ModelStates(weights=weights)


class DeepSpeedBackend:
    name = "deepspeed"

    def describe(self, spec: ExperimentSpec) -> str:
        t = spec.trainer
        offload = [k for k in ("offload_optimizer", "offload_params") if getattr(t, k)]
        extra = f", {' + '.join(offload)}" if offload else ""
        frozen = "sharded (ZeRO-3)" if t.zero_stage == 3 else "whole on every rank"
        return f"deepspeed ZeRO-{t.zero_stage}, {t.precision}{extra}; frozen models {frozen}"

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        from rlhf.engines.deepspeed_engine import init_distributed

        init_distributed(accelerator, timeout_s)

    def leave(self) -> None:
        # the ZeRO-3 switch first: a later job in this process (the local executor's) builds its models plainly
        global _HF_DS_CONFIG
        if _HF_DS_CONFIG is not None:
            from transformers.integrations.deepspeed import unset_hf_deepspeed_config

            unset_hf_deepspeed_config()
            _HF_DS_CONFIG = None
        from rlhf.engines.distributed import shutdown_distributed

        shutdown_distributed()

    def _hf_zero3(self, ds_config: dict[str, Any]) -> None:
        # transformers builds models inside zero.Init (partitioned at load) while an HfDeepSpeedConfig of a ZeRO-3
        # config exists; keep the first one alive until the rank leaves (every model of a rank uses the same stage).
        global _HF_DS_CONFIG
        if ds_config["zero_optimization"]["stage"] == 3 and _HF_DS_CONFIG is None:
            from transformers.integrations import HfDeepSpeedConfig

            _HF_DS_CONFIG = HfDeepSpeedConfig(ds_config)

    def build_trained(
        self, load: ModelLoader, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int
    ) -> Any:
        from rlhf.engines.deepspeed_engine import DeepSpeedTrainEngine
        from rlhf.engines.distributed import world_size
        from rlhf.engines.ds_config import train_ds_config

        t = spec.trainer
        cfg = train_ds_config(
            t,
            micro_batch=t.micro_batch_per_device,
            grad_accum=grad_accum,
            dp_size=world_size(),
            accelerator=spec.hardware.accelerator,
        )
        self._hf_zero3(cfg)
        return DeepSpeedTrainEngine(load(t.precision), cfg, trainer=t, lr=lr, total_steps=total_steps)

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> Any:
        from rlhf.engines.deepspeed_engine import DeepSpeedEvalEngine
        from rlhf.engines.distributed import world_size
        from rlhf.engines.ds_config import eval_ds_config

        t = spec.trainer
        cfg = eval_ds_config(
            zero_stage=t.zero_stage,
            precision=t.precision,
            offload=offload,
            dp_size=world_size(),
            accelerator=spec.hardware.accelerator,
        )
        self._hf_zero3(cfg)
        return DeepSpeedEvalEngine(load(t.precision), cfg)

    def trained_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, trainable: int | None = None
    ) -> ModelStates:
        t = spec.trainer
        return trained_states(
            params, largest_layer, dp, t.zero_stage, t.precision, t.offload_optimizer, t.offload_params, trainable
        )

    def frozen_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, offload: bool
    ) -> ModelStates:
        stage = 3 if spec.trainer.zero_stage == 3 else 0
        return frozen_states(params, dp, stage, spec.trainer.precision, offload)

    def gathers_on_every_rank(self, spec: ExperimentSpec) -> bool:
        return spec.trainer.zero_stage == 3


_HF_DS_CONFIG: Any = None
BACKEND = DeepSpeedBackend()
