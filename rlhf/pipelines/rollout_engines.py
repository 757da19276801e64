"""The rollout engines of a run as one object on the driver: spread prompts over them, sleep and wake them, restart
one (the weight sync is rlhf.pipelines.weight_sync's).

Starting them in the plan's bundles is the launch layer's job (``realized.start_rollout``, which returns a
rlhf.launch.rollout.RolloutEngineGroup); this module only talks to the actors, through the contract every backend
keeps (rlhf.engines.protocol.RolloutEngine), so nothing here depends on the backend.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.errors import WorkerFailure
from rlhf.spec.executor import heartbeat_s
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
        """The rollouts in prompt order; an engine that dies, raises, takes longer than trainer.remote_timeout_s or
        leaves its heartbeat unanswered for trainer.heartbeat_timeout_s raises an EngineFailure naming it (the run
        lifecycle restarts it)."""
        from rlhf.waits import Call, wait

        trainer = self.spec.trainer
        calls = [Call(ref, "rollout", i, self.label(i), actor=self.actors[i]) for i, ref in refs]
        parts = wait(
            calls, "generate", trainer.remote_timeout_s, error=EngineFailure, heartbeat_s=heartbeat_s(self.spec)
        )
        return [r for part in parts for r in part]

    def label(self, i: int) -> str:
        info = self.info[i] if i < len(self.info) else {}
        return f"rollout engine {i} ({self.backend}, pid {info.get('pid', '?')})"

    def restart(self, i: int) -> None:
        """Start engine ``i`` again in its bundle (what is left of it is killed first)."""
        self.realized.restart_rollout_engine(self.started, i)  # replaces actors[i] and info[i] in place
        if self.sleep_after_restart:
            self._all("sleep", 2, only=i)

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        return self.collect(self.generate_async(prompts, sampling))

    def sleep(self, level: int = 1) -> None:
        """Every engine releases its device memory (level 1: weights backed up to host; 2: dropped, for when a
        sync overwrites them next) and its workers' cached memory."""
        self._all("sleep", level)

    def wake(self, tags: list[str] | None = None) -> None:
        """Every engine brings back ``tags`` ("weights", "kv_cache"; None: both)."""
        self._all("wake", tags)

    def _all(self, method: str, arg: Any, only: int | None = None) -> None:
        """``method(arg)`` on every engine (or engine ``only``), bounded like generation: a dead, failing, late or
        stalled engine raises an EngineFailure naming it."""
        from rlhf.waits import Call, wait

        trainer = self.spec.trainer
        which = range(len(self.actors)) if only is None else [only]
        calls = [
            Call(getattr(self.actors[i], method).remote(arg), "rollout", i, self.label(i), actor=self.actors[i])
            for i in which
        ]
        wait(calls, method, trainer.remote_timeout_s, error=EngineFailure, heartbeat_s=heartbeat_s(self.spec))

    def kill(self) -> None:
        self.started.kill()


class PolicyEngines:
    """``rollout.hf.in_policy``: the policy's ranks are the engines (each generates with the module it trains,
    rlhf.workers.in_policy_rollout), behind the interface of :class:`RolloutEngines`. Nothing to sync, sleep or wake;
    a rank that fails while generating is a failure of the policy (the run lifecycle restarts every actor from the
    last checkpoint), since no engine can be restarted apart from its trainer."""

    backend = "hf"
    sleep_after_restart = False

    def __init__(self, spec: ExperimentSpec, policy: Any) -> None:
        from rlhf.waits import STARTUP_KEY, Call, wait

        self.spec = spec
        self.policy = policy
        self.actors = list(policy.actors)
        trainer = spec.trainer
        calls = [Call(a.rollout_ready.remote(), "policy", i, actor=a) for i, a in enumerate(self.actors)]
        self.info = wait(
            calls, "rollout_ready", trainer.startup_s, timeout_key=STARTUP_KEY, heartbeat_s=heartbeat_s(self.spec)
        )

    def __len__(self) -> int:
        return len(self.actors)

    def label(self, i: int) -> str:
        info = self.info[i] if i < len(self.info) else {}
        return f"policy rank {i} generating (hf in the policy's process, pid {info.get('pid', '?')})"

    def generate_async(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[tuple[int, Any]]:
        """Contiguous shares of the prompts per rank, as RolloutEngines spreads them over engines; (rank, ref)."""
        share = math.ceil(len(prompts) / len(self.actors))
        refs = []
        for i, actor in enumerate(self.actors):
            part = [list(map(int, p)) for p in prompts[i * share : (i + 1) * share]]
            if part:
                seed = None if sampling.seed is None else sampling.seed + i
                refs.append((i, actor.rollout_generate.remote(part, replace(sampling, seed=seed))))
        return refs

    def collect(self, refs: list[tuple[int, Any]]) -> list[Rollout]:
        from rlhf.waits import Call, wait

        trainer = self.spec.trainer
        calls = [Call(ref, "policy", i, self.label(i), actor=self.actors[i]) for i, ref in refs]
        parts = wait(calls, "generate", trainer.remote_timeout_s, heartbeat_s=heartbeat_s(self.spec))
        return [r for part in parts for r in part]

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        return self.collect(self.generate_async(prompts, sampling))

    def restart(self, i: int) -> None:
        raise EngineFailure(f"{self.label(i)} cannot restart apart from its trainer", role="policy", rank=i)

    def sleep(self, level: int = 1) -> None:
        """Nothing to release: the weights are the trainer's."""

    def wake(self, tags: list[str] | None = None) -> None:
        """Nothing was released."""

    def kill(self) -> None:
        """The policy's group ends them (they are its processes)."""
