"""Starting the rollout engines of a run in the plan's bundles, for every backend alike: the backend of
``rollout.backend`` says how one engine starts (rlhf.backends.contract.rollout.RolloutBackend.launch: its actor class,
interpreter, runtime environment and arguments); this module places each engine's actor in its bundle, claims its
shares (and its TP workers') in the plan's ledger before anything starts, and waits for it with a bound, naming what
it needs and what its bundles have free. The pipeline gets back a typed handle and never builds scheduling
strategies.

Tensor parallelism: the engine actor sits in its engine's first bundle; with TP > 1 it holds no GPU and its
workers take the rollout role's share of each of the engine's bundles (rlhf.backends.rollout.vllm.descriptor says how
vLLM's
Ray executor is told)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rlhf import faults
from rlhf.backends.contract.rollout import EngineLaunch, EnginePlacement
from rlhf.errors import WorkerFailure
from rlhf.launch import actor_env
from rlhf.launch.cluster import bundle_free, worker_start_env
from rlhf.spec.executor import heartbeat_s
from rlhf.spec.registry import rollout_backend
from rlhf.spec.schema import ExperimentSpec

__all__ = [
    "EnginePlacement",
    "RolloutEngineGroup",
    "engine_placements",
    "restart_engine",
    "start_engine_outside",
    "start_rollout_engines",
    "wait_ready",
]


@dataclass
class RolloutEngineGroup:
    """The started engines: one actor per engine, and what each said when it came up."""

    backend: str  # rollout.backend
    actors: list[Any]
    info: list[dict[str, Any]] = field(default_factory=list)
    workers_per_engine: int = 1  # processes that receive weights per engine (tensor_parallel_size)
    respawners: list[Any] = field(default_factory=list)  # per engine, a callable starting it (again)
    placements: list[EnginePlacement] = field(default_factory=list)  # where each engine and its workers go
    timeout_s: float | None = None
    startup_timeout_s: float | None = None  # trainer.startup_timeout_s (None: timeout_s)
    heartbeat_s: float | None = None  # trainer.heartbeat_timeout_s (rlhf.waits)
    needs: list[Callable[[], str]] = field(default_factory=list)  # per engine: what it needs, what is free there
    stop: Callable[[list[Any]], None] | None = None  # how the actors end (None: Ray's; the local executor's own)

    @property
    def where(self) -> list[str]:
        """Per engine, what it needs and what its bundles have free now."""
        out = []
        for need in self.needs:
            try:
                out.append(need())
            except Exception:  # noqa: BLE001 - a hint only: the cluster may be gone
                out.append("")
        return out

    def kill(self) -> None:
        if self.stop is not None:
            self.stop(self.actors)
            self.actors = []
            return
        import ray

        try:
            ray.get([a.shutdown.remote() for a in self.actors], timeout=30)
        except Exception:  # noqa: BLE001 - a dead or wedged engine is killed below anyway
            pass
        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []


def engine_placements(
    engine_bundles: tuple[tuple[int, ...], ...], bundle_order: list[int], bundle: dict[str, float], fraction: float
) -> list[EnginePlacement]:
    """Each engine's bundles (the plan's engine bundle slots mapped through the group's node-sorted order) and its
    Ray shares: the rollout role's ``fraction`` of each bundle."""
    out = []
    for e, slots in enumerate(engine_bundles):
        pg_bundles = tuple(bundle_order[b] for b in slots)
        cpus = bundle.get("CPU", 1.0) * fraction
        gpus = bundle.get("GPU", 0.0) * fraction
        tp = len(slots)
        out.append(EnginePlacement(e, pg_bundles, cpus, gpus if tp == 1 else 0.0, gpus if tp > 1 else None))
    return out


def wait_ready(started: RolloutEngineGroup, engines: list[int], method: str = "ready") -> list[dict[str, Any]]:
    """Each engine's ``method()`` (start-up), all at once, bounded by ``trainer.startup_timeout_s``: an engine that
    does not answer in time is named with what it needs and what its bundles have free."""
    from rlhf.waits import STARTUP_KEY, Call, wait

    calls = [
        Call(
            getattr(started.actors[i], method).remote(),
            "rollout",
            i,
            f"rollout engine {i} ({started.backend})",
            started.needs[i] if i < len(started.needs) else "",
            actor=started.actors[i],
        )
        for i in engines
    ]
    bound = started.timeout_s if started.startup_timeout_s is None else started.startup_timeout_s
    return wait(calls, "start-up", bound, timeout_key=STARTUP_KEY, error=WorkerFailure, heartbeat_s=started.heartbeat_s)


def restart_engine(started: RolloutEngineGroup, engine: int) -> Any:
    """Start engine ``engine`` again (killing what is left of it) in its bundle; returns the ready actor."""
    import ray

    try:
        ray.kill(started.actors[engine], no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    started.actors[engine] = started.respawners[engine]()
    started.info[engine] = wait_ready(started, [engine])[0]
    return started.actors[engine]


def start_rollout_engines(
    realized: Any, spec: ExperimentSpec, model_path: str, env: dict[str, str] | None, *, start: bool = True
) -> RolloutEngineGroup:
    """Start ``spec.rollout.num_engines`` engines of ``spec.rollout.backend`` in the rollout role's bundles
    (``env``: what the pipeline gives the role, e.g. its threads). With ``start=False`` (the rehearsal) the actors
    are placed but no engine is built (nothing touches a device)."""
    backend = rollout_backend(spec.rollout.backend)
    placement = realized.placement("rollout")
    slots = realized.executor.slots[placement.group]
    placements = engine_placements(placement.engine_bundles, slots.bundle_order, slots.group.bundle, placement.fraction)
    ledger = realized.executor.ledger
    if ledger is not None:  # an over-booked bundle is refused here, before anything starts
        for p in placements:
            for label, b, resources in p.claims():
                ledger.claim(label, placement.group, b, resources)
    base_env = {**realized.worker_env(), **faults.env()}
    starters = [
        partial(_start, backend.launch(spec, p, model_path, role_env=env, base_env=base_env), p, slots.pg)
        for p in placements
    ]
    started = RolloutEngineGroup(
        spec.rollout.backend,
        [begin() for begin in starters],
        [],
        spec.rollout.tensor_parallel_size,
        respawners=starters,
        placements=placements,
        timeout_s=spec.trainer.remote_timeout_s,
        startup_timeout_s=spec.trainer.startup_s,
        heartbeat_s=heartbeat_s(spec),
    )
    started.needs = [_needs(realized, p) for p in placements]
    if start:
        started.info = wait_ready(started, list(range(len(started.actors))))
    return started


def start_engine_outside(spec: ExperimentSpec, model_path: str, *, cpus: float = 1.0) -> RolloutEngineGroup:
    """One ready engine of ``spec.rollout.backend`` outside any placement group, with ``cpus`` CPUs and no GPU: a
    baseline beside a run's engines (the tests' and benchmarks' "fresh engine" that only ever loads from disk)."""
    backend = rollout_backend(spec.rollout.backend)
    p = EnginePlacement(0, (0,), cpus, 0.0, None)
    begin = partial(_start, backend.launch(spec, p, model_path, role_env=None, base_env=faults.env()), p, None)
    started = RolloutEngineGroup(spec.rollout.backend, [begin()], [], respawners=[begin], placements=[p])
    started.timeout_s = spec.trainer.remote_timeout_s
    started.startup_timeout_s = spec.trainer.startup_s
    started.heartbeat_s = heartbeat_s(spec)
    started.info = wait_ready(started, [0])
    return started


def _start(launch: EngineLaunch, p: EnginePlacement, pg: Any) -> Any:
    """One engine's actor in its first bundle of ``pg`` (None: anywhere), as ``launch`` describes it (its liveness
    group declared)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlhf.backends.shared.liveness import remote_class

    module, name = launch.actor.split(":")
    at_start, in_process = actor_env.split(launch.runtime_env, worker_start_env())
    actor_cls = getattr(importlib.import_module(module), name)
    actor_cls = remote_class(actor_env.with_env(actor_cls) if in_process else actor_cls)
    options: dict[str, Any] = {"num_cpus": p.actor_cpus, "num_gpus": p.actor_gpus, "max_restarts": 0}
    if at_start:
        options["runtime_env"] = at_start
    kwargs = {**launch.kwargs, actor_env.ENV_KWARG: in_process} if in_process else launch.kwargs
    if pg is not None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=pg,
            placement_group_bundle_index=p.actor_bundle,
            placement_group_capture_child_tasks=launch.capture_child_tasks,
        )
    return actor_cls.options(**options).remote(*launch.args, **kwargs)


def _needs(realized: Any, p: EnginePlacement) -> Callable[[], str]:
    """What engine ``p`` asks Ray for and what its bundles have free at the time of asking (a hint for a bounded
    wait's message, computed when it is shown)."""

    def text() -> str:
        slots = realized.executor.slots[realized.placement("rollout").group]
        parts = [f"the engine actor needs CPU {p.actor_cpus:g}, GPU {p.actor_gpus:g} in bundle {p.actor_bundle}"]
        if p.worker_gpus is not None:
            parts.append(f"each of its {len(p.bundles)} TP workers GPU {p.worker_gpus:g} in bundles {list(p.bundles)}")
        free = {b: bundle_free(slots.pg, b) for b in dict.fromkeys(p.bundles)}
        parts.append("free there: " + ", ".join(f"bundle {b} {f}" for b, f in free.items()))
        return "; ".join(parts)

    return text
