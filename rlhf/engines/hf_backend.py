"""``rollout.backend=hf``: transformers ``generate`` with a KV cache (rlhf.engines.hf_engine), each engine a
rlhf.workers.rollout_worker.HFRolloutWorker in the trainer's own venv; or, with ``rollout.hf.in_policy``, no process
of its own: each policy rank generates with the model it trains (rlhf.workers.in_policy_rollout), so no weights are
synced. No extra dependency, no tensor parallelism (rlhf.spec.rollout_backends says so at validation); with LoRA it
loads adapter-only syncs (rollout.weight_sync_lora=adapter). No torch import here: the plan reads it."""

from __future__ import annotations

from typing import Any

from rlhf.engines.lora_sync import adapter_sync, lora_settings
from rlhf.engines.protocol import EngineLaunch, EnginePlacement, RolloutMemory, kv_cache_bytes_per_token
from rlhf.spec.rollout_backends import generates_in_policy
from rlhf.spec.schema import ExperimentSpec

ACTOR = "rlhf.workers.rollout_worker:HFRolloutWorker"
MAX_BATCH = 512  # rlhf.engines.hf_engine.HFEngine(max_batch_size=512): sequences per generate call


def _bytes_per_value(spec: ExperimentSpec) -> int:
    """The engine's dtype (HFRolloutWorker): fp32 on CPU; on GPUs bf16 when the trainer trains in bf16."""
    return 2 if spec.hardware.accelerator == "gpu" and spec.trainer.precision == "bf16" else 4


class HFBackend:
    """rlhf.engines.protocol.RolloutBackend for transformers generate."""

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

    def preflight(self, spec: ExperimentSpec) -> list[str]:
        return []  # transformers is a core dependency; the model folder is checked by validation

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
            # computes on the one Ray reserved for it (rlhf.workers.rollout_worker.engine_device).
            env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
        kwargs = {"lora": lora_settings(spec)} if adapter_sync(spec) else {}
        return EngineLaunch(ACTOR, (model_path, hw.accelerator, spec.trainer.precision), kwargs, {"env_vars": env})

    def tensor_parallel(self, spec: ExperimentSpec) -> bool:
        return False

    def kv_bounds_batch(self, spec: ExperimentSpec) -> bool:
        return False

    def generation_batch(self, spec: ExperimentSpec, sequences: int, kv_tokens: float | None, seq: float) -> int:
        return min(sequences, MAX_BATCH)

    def loads_synced_weights(self, spec: ExperimentSpec) -> bool:
        return False  # the cost model does not count its load apart from the transfer

    def auto_options(self, spec: ExperimentSpec) -> list[dict[str, Any]]:
        return []

    def label(self, spec: ExperimentSpec) -> str:
        return ""


BACKEND = HFBackend()
