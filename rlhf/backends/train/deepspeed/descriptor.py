"""``trainer.backend=deepspeed``: the :class:`rlhf.backends.contract.training.TrainBackend` of DeepSpeed ZeRO 0-3.

Its keys are the trainer section's own (``trainer.zero_stage``, ``offload_optimizer``, ``offload_params``); the
engines are in ``engine`` and their configs in ``ds_config`` (imported when an engine is built: this module
imports no torch, the plan uses it).

Memory per device, DeepSpeed's own accounting (P parameters, N data-parallel ranks):
    mixed precision (bf16/fp16): 2 (16-bit weights) + 2 (16-bit grads) + 4 (fp32 grads) + 4 (fp32 master) + 8 (Adam)
    fp32:                       4 (weights) + 4 (grads) + 8 (Adam)
    ZeRO-1 partitions master + Adam (/N), ZeRO-2 also the gradients, ZeRO-3 also the weights (+ 4 bytes x the largest
    layer, the gathered-parameter buffer; no separate 16-bit gradient partition, so 18 bytes per parameter / N).
    offload_optimizer moves master, fp32 grads and Adam to host memory; offload_params (ZeRO-3) the weights too.
    LoRA: the base weights frozen (weights only), the adapters trained in full.
    This is what deepspeed's estimate_zero{2,3}_model_states_mem_needs compute (tests/planning/test_plan.py compares).
Frozen models: weights only, sharded /N under ZeRO-3 (when the trained models use stage 3), 0 when offloaded.
"""

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


Problem = tuple[str, Any, str]


def _require(out: list[Problem], ok: bool, key: str, value: Any, fix: str) -> None:
    if not ok:
        out.append((key, value, fix))


def _gpu_problems(spec: ExperimentSpec, d: Any) -> list[Problem]:
    """Combinations DeepSpeed refuses on GPUs, named before anything starts (deepspeed/runtime/engine.py
    ``offload_states`` asserts no offloaded parameters; ZeRO-3's ``offload_states`` asserts FusedAdam; ZeRO-0 has
    no ZeRO optimizer to offload; DeepSpeedCPUAdam steps host tensors only)."""
    out: list[Problem] = []
    hw, t, ro = spec.hardware, spec.trainer, spec.rollout
    if hw.accelerator != "gpu" or not any(r in d.roles for r in ("policy", "critic")):
        return out
    _require(
        out,
        not (t.optimizer == "cpu_adam" and not t.offload_optimizer),
        "trainer.optimizer",
        t.optimizer,
        "cpu_adam steps optimizer states in host memory: set trainer.offload_optimizer=true, or use fused_adam",
    )
    _require(
        out,
        not (t.offload_params and t.zero_stage != 3),
        "trainer.offload_params",
        True,
        f"parameter offload is a ZeRO-3 feature (trainer.zero_stage={t.zero_stage}): set trainer.zero_stage=3",
    )
    group = d.group_of("rollout")
    hybrid = "rollout" in d.roles and ro.enable_sleep and not ro.async_mode
    trained_beside = [r for r in ("policy", "critic") if r in group] if hybrid else []
    if not trained_beside:
        return out
    where = f"rollout colocated with {'+'.join(trained_beside)} and rollout.enable_sleep"
    fix = "; or set rollout.enable_sleep=false, or give the rollout its own devices (placement=colocate_actor_ref)"
    for key, on in (("trainer.offload_optimizer", t.offload_optimizer), ("trainer.offload_params", t.offload_params)):
        _require(
            out,
            not on,
            key,
            on,
            f"{where}: the trainers' states move to host memory around every generation, which DeepSpeed refuses "
            f"for states it already offloads (engine.offload_states); set {key}=false{fix}",
        )
    _require(
        out,
        t.zero_stage >= 1,
        "trainer.zero_stage",
        t.zero_stage,
        f"{where}: moving the trainers' states out around generation needs a ZeRO optimizer (stage 1-3){fix}",
    )
    _require(
        out,
        not (t.zero_stage == 3 and t.optimizer != "fused_adam"),
        "trainer.optimizer",
        t.optimizer,
        f"{where}: ZeRO-3 moves optimizer states only for DeepSpeed's FusedAdam (stage3 offload_states); use "
        f"trainer.optimizer=fused_adam{fix}",
    )
    return out


def _rules(spec: ExperimentSpec) -> list[Problem]:
    t, out = spec.trainer, []
    if t.on_nonfinite == "skip" and t.zero_stage < 1:
        out.append(
            (
                "trainer.on_nonfinite",
                t.on_nonfinite,
                "skip needs trainer.zero_stage >= 1 (DeepSpeed's ZeRO optimizer is what drops a non-finite step)",
            )
        )
    if spec.model.lora.rank > 0 and t.offload_params:
        out.append(
            (
                "trainer.offload_params",
                True,
                "LoRA with ZeRO-3 parameter offload is not supported; set trainer.offload_params=false",
            )
        )
    return out


class DeepSpeedBackend(TrainBackendBase):
    name = "deepspeed"
    splits_sequences = True  # trainer.sequence_parallel_size: rlhf.models.sequence_parallel in its engines

    def describe(self, spec: ExperimentSpec) -> str:
        t = spec.trainer
        offload = [k for k in ("offload_optimizer", "offload_params") if getattr(t, k)]
        extra = f", {' + '.join(offload)}" if offload else ""
        frozen = "sharded (ZeRO-3)" if t.zero_stage == 3 else "whole on every rank"
        return f"deepspeed ZeRO-{t.zero_stage}, {t.precision}{extra}; frozen models {frozen}"

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        from rlhf.backends.train.deepspeed.engine import init_distributed

        init_distributed(accelerator, timeout_s)

    def leave(self) -> None:
        # the ZeRO-3 switch first: a later job in this process (the local executor's) builds its models plainly
        global _HF_DS_CONFIG
        if _HF_DS_CONFIG is not None:
            from transformers.integrations.deepspeed import unset_hf_deepspeed_config

            unset_hf_deepspeed_config()
            _HF_DS_CONFIG = None
        from rlhf.backends.shared.distributed import shutdown_distributed

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
        from rlhf.backends.shared.distributed import world_size
        from rlhf.backends.train.deepspeed.ds_config import train_ds_config
        from rlhf.backends.train.deepspeed.engine import DeepSpeedTrainEngine

        t = spec.trainer
        cfg = train_ds_config(
            t,
            micro_batch=t.micro_batch_per_device,
            grad_accum=grad_accum,
            dp_size=world_size(),
            accelerator=spec.hardware.accelerator,
        )
        self._hf_zero3(cfg)
        sp = self.mesh(spec, world_size()).sequence
        return DeepSpeedTrainEngine(
            load(t.precision), cfg, trainer=t, lr=lr, total_steps=total_steps, sequence_parallel=sp
        )

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> Any:
        from rlhf.backends.shared.distributed import world_size
        from rlhf.backends.train.deepspeed.ds_config import eval_ds_config
        from rlhf.backends.train.deepspeed.engine import DeepSpeedEvalEngine

        t = spec.trainer
        cfg = eval_ds_config(
            zero_stage=t.zero_stage,
            precision=t.precision,
            offload=offload,
            dp_size=world_size(),
            accelerator=spec.hardware.accelerator,
        )
        self._hf_zero3(cfg)
        return DeepSpeedEvalEngine(load(t.precision), cfg, sequence_parallel=self.mesh(spec, world_size()).sequence)

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

    def shards_optimizer_states(self, spec: ExperimentSpec) -> bool:
        return spec.trainer.zero_stage >= 1

    def gathered_units(self, spec: ExperimentSpec) -> int:
        """ZeRO-3's hooks fetch each module holding parameters: 7 projections and 2 norms per decoder layer, then
        the embeddings and the final norm."""
        m = spec.model
        return 9 * m.num_layers + (2 if m.tie_word_embeddings else 3)

    def module_cost(self, constants: Any) -> Any:
        return constants.zero3_module

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
        """ZeRO-3 gathers the weights in each pass (again to recompute) and reduce-scatters the gradients; ZeRO-2
        reduce-scatters the gradients per micro-batch in buckets and all-gathers the weights after the step; ZeRO
        0-1 all-reduce the gradients once per step. Parameter offload (ZeRO-3) crosses the host link per pass."""
        t = spec.trainer
        per_mb = per_step = 0.0
        if t.zero_stage == 3:
            gathers = 3 if t.gradient_checkpointing else 2
            per_mb += hidden * (gathers * net.ring(weight_bytes, ranks, link) + net.ring(grad_bytes, ranks, link))
            per_mb += net.calls((gathers + 1) * units, ranks)
        elif t.zero_stage == 2:
            per_mb += hidden * net.ring(grad_bytes, ranks, link) + net.calls(buckets, ranks)
            per_step += net.ring(weight_bytes, ranks, link) + net.calls(buckets, ranks)
        else:
            per_step += 2 * net.ring(grad_bytes, ranks, link) + net.calls(buckets, ranks)
        if t.offload_params and t.zero_stage == 3 and gpu:
            per_mb += (2 + (1 if t.gradient_checkpointing else 0)) * net.host(weight_bytes / ranks)
        return TrainTraffic(per_mb, per_step, t.offload_optimizer and gpu)

    def offloads_frozen(self, spec: ExperimentSpec) -> bool:
        # offload_param is a ZeRO-3 feature (rlhf.backends.train.deepspeed.ds_config): under ZeRO 0-2 frozen models
        # stay on the device
        return spec.trainer.zero_stage == 3

    def auto_defaults(self) -> dict[str, Any]:
        return {"trainer.offload_optimizer": False, "trainer.offload_params": False}

    def auto_options(self, spec: ExperimentSpec, *, gpu: bool, turns: bool, lora: bool) -> list[dict[str, Any]]:
        """ZeRO 0-3, with optimizer offload on GPUs (stage >= 1) and parameter offload (ZeRO-3 without LoRA); none
        that DeepSpeed refuses: offload under the hybrid engine's turns, ZeRO-0 there."""
        out: list[dict[str, Any]] = []
        for stage in (0, 1, 2, 3):
            if turns and stage == 0:
                continue
            out.append({"trainer.zero_stage": stage})
            if gpu and not turns and stage >= 1:
                out.append({"trainer.zero_stage": stage, "trainer.offload_optimizer": True})
            if gpu and not turns and stage == 3 and not lora:
                out.append({"trainer.zero_stage": 3, "trainer.offload_optimizer": True, "trainer.offload_params": True})
        return out

    def label(self, spec: ExperimentSpec) -> str:
        t = spec.trainer
        out = f"ZeRO-{t.zero_stage}"
        if t.offload_optimizer:
            out += " off-optim"
        if t.offload_params:
            out += "+params"
        return out

    def layout_keys(self, values: dict[str, Any]) -> list[str]:
        return [k for k in ("trainer.zero_stage", "trainer.offload_optimizer", "trainer.offload_params") if k in values]

    # -- its rules (rlhf.spec.train_backend_rules asks them) --
    def problems(self, spec: ExperimentSpec, d: Any) -> list[Problem]:
        """What DeepSpeed refuses of this config, before anything starts."""
        return _rules(spec) + _gpu_problems(spec, d)

    def weights_split(self, spec: ExperimentSpec) -> Problem | None:
        return ("trainer.zero_stage", spec.trainer.zero_stage, "ZeRO-3") if spec.trainer.zero_stage > 2 else None

    def beside_an_engine(self, spec: ExperimentSpec) -> list[Problem]:
        if spec.trainer.zero_stage != 3:
            return []
        why = (
            "ZeRO-3 builds every model of its process partitioned (transformers' HfDeepSpeedConfig is process-wide), "
            "the rollout engine's beside the policy too"
        )
        return [("trainer.zero_stage", 3, why)]

    def optimizer_bound_to_ranks(self, flat: dict[str, Any]) -> bool:
        """ZeRO 1-3 save each rank's optimizer partition: a checkpoint resumes on as many ranks as saved it."""
        return int(flat.get("trainer.zero_stage") or 0) >= 1

    # -- its checkpoints (rlhf.backends.train.deepspeed.checkpoint: the layout) --
    def checkpoint_weights(self, folder: Path) -> SavedWeights:
        from rlhf.backends.train.deepspeed import checkpoint

        return checkpoint.checkpoint_weights(folder)

    def checkpoint_state_dict(self, folder: Path) -> dict[str, Any]:
        from rlhf.backends.train.deepspeed import checkpoint

        return checkpoint.checkpoint_state_dict(folder)

    def checkpoint_bound_keys(self) -> tuple[str, ...]:
        """The ZeRO stage lays out the saved model and optimizer states (which files, which partitions)."""
        return ("trainer.zero_stage",)

    def preload_modules(self) -> tuple[str, ...]:
        # "deepspeed" is imported by the preloader through rlhf.backends.train.deepspeed.deepspeed_import, as every
        # engine imports it
        return ("deepspeed", "rlhf.backends.train.deepspeed.engine")


_HF_DS_CONFIG: Any = None
BACKEND = DeepSpeedBackend()
