"""The rollout engines of a run as one object on the driver: spread prompts over them, sleep and wake them, restart
one (the weight sync is rlhf.backends.weight_sync.driver's).

Starting them in the plan's bundles is the launch layer's job (``realized.start_rollout``, which returns a
rlhf.launch.rollout.RolloutEngineGroup); this module only talks to the actors, through the contract every backend
keeps (rlhf.backends.contract.rollout.RolloutEngine), so nothing here depends on the backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.errors import WorkerFailure
from rlhf.spec.executor import heartbeat_s
from rlhf.spec.schema import ExperimentSpec


class EngineFailure(WorkerFailure):
    """A rollout engine died, hung or raised while generating; ``rank`` is its index."""


def spread(actors: list[Any], method: str, prompts: list[list[int]], sampling: SamplingSpec) -> list[tuple[int, Any]]:
    """``method(share, sampling)`` called on each actor with a contiguous share of ``prompts`` (so the results come
    back in prompt order) and the sampling seed offset by its index; (index, ref) for each actor given a share."""
    share = math.ceil(len(prompts) / len(actors))
    refs = []
    for i, actor in enumerate(actors):
        part = [list(map(int, p)) for p in prompts[i * share : (i + 1) * share]]
        if part:
            seed = None if sampling.seed is None else sampling.seed + i
            refs.append((i, getattr(actor, method).remote(part, replace(sampling, seed=seed))))
    return refs


def gather(
    spec: ExperimentSpec,
    refs: list[tuple[int, Any]],
    actors: list[Any],
    role: str,
    label: Callable[[int], str],
    error: type[WorkerFailure] = WorkerFailure,
) -> list[Rollout]:
    """What :func:`spread` started, in prompt order, each call bounded by trainer.remote_timeout_s and the role's
    heartbeat; a dead, failing, late or stalled actor raises ``error`` naming it."""
    from rlhf.waits import Call, wait

    calls = [Call(ref, role, i, label(i), actor=actors[i]) for i, ref in refs]
    parts = wait(calls, "generate", spec.trainer.remote_timeout_s, error=error, heartbeat_s=heartbeat_s(spec))
    return [r for part in parts for r in part]


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
        return spread(self.actors, "generate", prompts, sampling)

    def collect(self, refs: list[tuple[int, Any]]) -> list[Rollout]:
        """The rollouts in prompt order; an engine that dies, raises, takes longer than trainer.remote_timeout_s or
        leaves its heartbeat unanswered for trainer.heartbeat_timeout_s raises an EngineFailure naming it (the run
        lifecycle restarts it)."""
        return gather(self.spec, refs, self.actors, "rollout", self.label, error=EngineFailure)

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
    rlhf.backends.rollout.hf.in_policy), behind the interface of :class:`RolloutEngines`. Nothing to sync, sleep or
    wake;
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
        return spread(self.actors, "rollout_generate", prompts, sampling)

    def collect(self, refs: list[tuple[int, Any]]) -> list[Rollout]:
        """The rollouts in prompt order; a rank that fails is a failure of the policy (WorkerFailure)."""
        return gather(self.spec, refs, self.actors, "policy", self.label)

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
