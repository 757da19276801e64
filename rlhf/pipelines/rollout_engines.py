"""The rollout engines of a run as one object on the driver: spread prompts over them, load new weights into all of
them (the object-store reference route; the other routes are rlhf.pipelines.weight_sync), sleep and wake them.

Starting them in the plan's bundles is the launch layer's job (``realized.start_rollout``, which returns a
rlhf.launch.rollout.RolloutEngineGroup); this module only talks to the actors. vLLM actors run in the vllm venv,
so everything crossing to them is plain data and object-store weights go as one packed byte buffer
(rlhf.engines.vllm_worker.PackedWeights).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.spec.schema import ExperimentSpec


class RolloutEngines:
    def __init__(self, spec: ExperimentSpec, realized: Any, model_path: str, env: dict[str, str] | None) -> None:
        self.spec = spec
        self.backend = spec.rollout.backend
        self.started = realized.start_rollout(model_path, env)
        self.actors = self.started.actors
        self.info = self.started.info

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
        self.started.kill()
