"""``rollout.backend=hf``: transformers ``generate`` with a KV cache (rlhf.backends.rollout.hf.engine), each engine a
rlhf.backends.rollout.hf.actor.HFRolloutWorker in the trainer's own venv; or, with ``rollout.hf.in_policy``, no process
of its own: each policy rank generates with the model it trains (rlhf.backends.rollout.hf.in_policy), so no weights are
synced. No extra dependency, no tensor parallelism (its ``problems`` say so at validation); with LoRA it
loads adapter-only syncs (rollout.weight_sync_lora=adapter). No torch import here: the plan reads it."""

from __future__ import annotations

from typing import Any

from rlhf.backends.contract.rollout import (
    EngineLaunch,
    EnginePlacement,
    RolloutBackendBase,
    RolloutMemory,
    kv_cache_bytes_per_token,
)
from rlhf.backends.weight_sync.lora import adapter_sync, lora_settings
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.train_backend_rules import weights_split

Problem = tuple[str, Any, str]

ACTOR = "rlhf.backends.rollout.hf.actor:HFRolloutWorker"
MAX_BATCH = 512  # rlhf.backends.rollout.hf.engine.HFEngine(max_batch_size=512): sequences per generate call


def _bytes_per_value(spec: ExperimentSpec) -> int:
    """The engine's dtype (HFRolloutWorker): fp32 on CPU; on GPUs bf16 when the trainer trains in bf16."""
    return 2 if spec.hardware.accelerator == "gpu" and spec.trainer.precision == "bf16" else 4


def _hf(spec: ExperimentSpec, d: Any) -> list[Problem]:
    tp = spec.rollout.tensor_parallel_size
    out: list[Problem] = []
    if tp != 1:
        out.append(
            (
                "rollout.tensor_parallel_size",
                tp,
                "the hf engine (transformers generate) runs on one device: set it to 1 and raise "
                "rollout.num_engines, or use rollout=vllm",
            )
        )
    if spec.rollout.hf.in_policy:
        out += _in_policy(spec, d)
    return out


def _in_policy(spec: ExperimentSpec, d: Any) -> list[Problem]:
    """``rollout.hf.in_policy``: each policy rank generates with the module it trains, so the rollout must sit on
    the policy's devices, one engine per rank, with the whole weights in every rank and nothing else running."""
    ro = spec.rollout
    key, off = "rollout.hf.in_policy", "or set rollout.hf.in_policy=false (engines in processes of their own)"
    if "policy" not in d.roles:
        return [(key, True, f"generating in the policy's ranks needs a policy that trains: {off}")]
    out: list[Problem] = []
    if "rollout" not in d.group_of("policy"):
        out.append((key, True, f"the rollout must share the policy's devices (placement=colocate_all); {off}"))
    ranks = d.devices.get("policy", 0)
    if ro.num_engines != ranks:
        out.append(("rollout.num_engines", ro.num_engines, f"one engine per policy rank: set it to {ranks}; {off}"))
    split = weights_split(spec)
    if split is not None:
        out.append(
            (
                split[0],
                split[1],
                "generating in the policy's ranks needs the whole weights on every rank (DeepSpeed ZeRO 0-2: "
                f"ZeRO-3's and FSDP2's forward passes gather weights across the ranks); {off}",
            )
        )
    if ro.async_mode:
        out.append(
            ("rollout.async_mode", True, f"the policy's ranks cannot generate while they train: set it false, {off}")
        )
    return out


class HFBackend(RolloutBackendBase):
    """rlhf.backends.contract.rollout.RolloutBackend for transformers generate. The rest is the base's defaults: no
    tensor parallelism, its batch not bounded by a planned KV cache, a sync copied straight into its model, nothing
    for --auto to scan or to check before start, the cost model's own decode step."""

    name = "hf"

    def describe(self, spec: ExperimentSpec) -> str:
        precision = "bf16" if _bytes_per_value(spec) == 2 else "fp32"
        if generates_in_policy(spec):
            return (
                f"{spec.rollout.num_engines} engine(s) in the policy's ranks (rollout.hf.in_policy): transformers "
                f"generate with the trained weights, {precision}, no weight sync"
            )
        return f"{spec.rollout.num_engines} engine(s): transformers generate, {precision}, one process each"

    def memory(self, spec: ExperimentSpec, params: int) -> RolloutMemory:
        """Its weights plus the KV cache of its share of a step's sequences (prompts_per_step x samples_per_prompt
        over the engines), each data.max_len tokens long; in the policy's ranks (rollout.hf.in_policy) the KV cache
        alone, since it generates with the weights the trainer holds."""
        ro, b = spec.rollout, _bytes_per_value(spec)
        weights = 0.0 if generates_in_policy(spec) else float(params * b)
        seqs = ro.prompts_per_step * ro.samples_per_prompt / max(ro.num_engines, 1)
        kv = seqs * spec.data.max_len * kv_cache_bytes_per_token(spec.model, b)
        return RolloutMemory(weights, kv, weights + kv)

    def launch(
        self,
        spec: ExperimentSpec,
        placement: EnginePlacement,
        model_path: str,
        *,
        role_env: dict[str, str] | None,
        base_env: dict[str, str],
    ) -> EngineLaunch:
        hw = spec.hardware
        # Threads: its share of the bundle's CPUs (at least one), unless the pipeline gives the role more.
        env = {"OMP_NUM_THREADS": str(max(int(placement.actor_cpus), 1)), **base_env, **(role_env or {})}
        if hw.accelerator == "cpu":
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as every CPU rank (rlhf.launch.realize.RoleGroup)
        elif placement.actor_gpus < 1:
            # Colocated roles share a GPU: the engine sees every GPU of the node, as the trainers beside it do, and
            # computes on the one Ray reserved for it (rlhf.backends.rollout.hf.actor.engine_device).
            env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
        kwargs = {"lora": lora_settings(spec)} if adapter_sync(spec) else {}
        return EngineLaunch(ACTOR, (model_path, hw.accelerator, spec.trainer.precision), kwargs, {"env_vars": env})

    def generation_batch(self, spec: ExperimentSpec, sequences: int, kv_tokens: float | None, seq: float) -> int:
        """At most the engine's chunk of sequences per ``generate`` call (its KV cache is allocated per call)."""
        return min(sequences, MAX_BATCH)

    def problems(self, spec: ExperimentSpec, d: Any) -> list[Problem]:
        return _hf(spec, d)

    def in_policy_engine(self, module: Any, tokenizer: Any) -> Any:
        from rlhf.backends.rollout.hf.in_policy import InPolicyRollout

        return InPolicyRollout(module, tokenizer)


BACKEND = HFBackend()
