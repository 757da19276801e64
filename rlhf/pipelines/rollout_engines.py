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
from rlhf.errors import WorkerFailure
from rlhf.spec.schema import ExperimentSpec


class EngineFailure(WorkerFailure):
    """A rollout engine died, hung or raised while generating; ``rank`` is its index."""


class RolloutEngines:
    def __init__(self, spec: ExperimentSpec, realized: Any, model_path: str, env: dict[str, str] | None) -> None:
        self.spec = spec
        self.backend = spec.rollout.backend
        self.realized = realized
        self.started = realized.start_rollout(model_path, env)
        self.actors = self.started.actors
        self.info = self.started.info
        self.sleep_after_restart = False  # hybrid engine: a restarted engine goes to sleep at once (a sync follows)

    def __len__(self) -> int:
        return len(self.actors)

    def generate_async(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[tuple[int, Any]]:
        """Contiguous shares of the prompts per engine (so results come back in prompt order); (engine, ref)."""
        share = math.ceil(len(prompts) / len(self.actors))
        refs = []
        for i, actor in enumerate(self.actors):
            part = [list(map(int, p)) for p in prompts[i * share : (i + 1) * share]]
            if part:
                seed = None if sampling.seed is None else sampling.seed + i
                refs.append((i, actor.generate.remote(part, replace(sampling, seed=seed))))
        return refs

    def collect(self, refs: list[tuple[int, Any]]) -> list[Rollout]:
        """The rollouts in prompt order; an engine that dies, raises or takes longer than trainer.remote_timeout_s
        raises an EngineFailure naming it (the run lifecycle restarts it)."""
        import time

        import ray

        timeout = self.spec.trainer.remote_timeout_s
        deadline = time.monotonic() + timeout
        results: dict[int, list[Rollout]] = {}
        pending = {ref: i for i, ref in refs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
            if not done:
                i = min(pending.values())
                raise EngineFailure(
                    f"{self.label(i)} did not finish generating within {timeout:.0f} s (trainer.remote_timeout_s)",
                    role="rollout",
                    rank=i,
                    kind="hung",
                )
            i = pending.pop(done[0])
            try:
                results[i] = ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise EngineFailure(
                    f"{self.label(i)} died during generate: {first}", role="rollout", rank=i, kind="died"
                ) from e
            except ray.exceptions.RayTaskError as e:
                raise EngineFailure(f"{self.label(i)} failed in generate:\n{e}", role="rollout", rank=i) from e
        return [r for i, _ in refs for r in results[i]]

    def label(self, i: int) -> str:
        info = self.info[i] if i < len(self.info) else {}
        return f"rollout engine {i} ({self.backend}, pid {info.get('pid', '?')})"

    def restart(self, i: int) -> None:
        """Start engine ``i`` again in its bundle (what is left of it is killed first)."""
        self.realized.restart_rollout_engine(self.started, i)  # replaces actors[i] and info[i] in place
        if self.sleep_after_restart:
            import ray

            ray.get(self.actors[i].sleep.remote(2))

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

    def sleep(self, level: int = 1) -> None:
        """Every engine releases its device memory (level 1: weights backed up to host; 2: dropped, for when a
        sync overwrites them next) and its workers' cached memory."""
        import ray

        ray.get([a.sleep.remote(level) for a in self.actors])

    def wake(self, tags: list[str] | None = None) -> None:
        """Every engine brings back ``tags`` ("weights", "kv_cache"; None: both)."""
        import ray

        ray.get([a.wake.remote(tags) for a in self.actors])

    def kill(self) -> None:
        self.started.kill()
