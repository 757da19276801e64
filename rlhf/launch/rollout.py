"""Starting the rollout engines of a run in the plan's bundles: hf engines as one Ray actor group in the main venv,
vLLM engines as actors with the vLLM interpreter. The pipeline gets back a typed handle and never builds scheduling
strategies.

vLLM with tensor parallelism (rlhf.engines.vllm_placement has vLLM's rule): the engine actor takes no GPU and sits
in its engine's first bundle; vLLM's Ray executor starts one worker per TP rank in the bundles the actor names in
``VLLM_RAY_BUNDLE_INDICES`` (the engine's own, so engines never share a device), each with the rollout role's
share of its bundle as ``VLLM_RAY_PER_WORKER_GPUS`` (so the workers fit beside colocated trainers), as OpenRLHF's
create_vllm_engines does. Every share is claimed in the plan's ledger before anything starts, and every wait for
an engine is bounded, naming what it needs and what its bundles have free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf import faults
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


@dataclass
class RolloutEngineGroup:
    """The started engines: one actor per engine, and what each said when it came up."""

    backend: str  # hf | vllm
    actors: list[Any]
    info: list[dict[str, Any]] = field(default_factory=list)
    workers_per_engine: int = 1  # processes that receive weights per engine (vLLM: tensor_parallel_size)
    role_group: Any = None  # hf: the RoleGroup (shut down with the others)
    respawners: list[Any] = field(default_factory=list)  # vLLM: per engine, a callable starting it again
    placements: list[EnginePlacement] = field(default_factory=list)  # vLLM: where each engine and its workers go
    timeout_s: float | None = None
    where: list[str] = field(default_factory=list)  # per engine: what it needs and what its bundles have free

    def kill(self) -> None:
        import ray

        if self.role_group is not None:
            self.role_group.kill()
        else:
            for a in self.actors:
                ray.kill(a, no_restart=True)
        self.actors = []


def restart_engine(started: RolloutEngineGroup, engine: int) -> Any:
    """Start engine ``engine`` again (killing what is left of it) in its bundle; returns the ready actor."""
    import ray

    if started.role_group is not None:
        actor = started.role_group.respawn(engine)
    else:
        try:
            ray.kill(started.actors[engine], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        actor = started.respawners[engine]()
    started.actors[engine] = actor
    started.info[engine] = _wait_ready(
        started.backend, [actor], first=engine, timeout_s=started.timeout_s, where=started.where[engine : engine + 1]
    )[0]
    return actor


@dataclass(frozen=True)
class EnginePlacement:
    """Where one engine goes and what it asks Ray for (pure: from the plan and the placement group's order)."""

    engine: int
    bundles: tuple[int, ...]  # placement-group bundle index of each TP worker, in rank order
    actor_cpus: float
    actor_gpus: float  # TP 1: the engine computes in its actor; TP > 1: 0 (its workers hold the GPUs)
    worker_gpus: float | None  # TP > 1: VLLM_RAY_PER_WORKER_GPUS; None for TP 1

    @property
    def actor_bundle(self) -> int:
        return self.bundles[0]

    def claims(self) -> list[tuple[str, int, dict[str, float]]]:
        """(label, bundle, resources) of the engine actor and of every TP worker vLLM will start."""
        out = [(f"rollout engine {self.engine}", self.actor_bundle, {"CPU": self.actor_cpus, "GPU": self.actor_gpus})]
        if self.worker_gpus is not None:
            out += [
                (f"rollout engine {self.engine} worker {k}", b, {"GPU": self.worker_gpus})
                for k, b in enumerate(self.bundles)
            ]
        return out


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


def _wait_ready(
    backend: str,
    actors: list[Any],
    first: int = 0,
    timeout_s: float | None = None,
    where: list[str] | None = None,
    method: str = "ready",
) -> list[dict[str, Any]]:
    """Each actor's ``method()`` (start-up), the wait bounded by ``timeout_s``: an engine that does not answer in
    time is named with what it needs and what its bundles have free (``where``)."""
    import time

    import ray

    refs = [getattr(a, method).remote() for a in actors]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    info = []
    for i, ref in enumerate(refs):
        engine = first + i
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        done, _ = ray.wait([ref], timeout=left)
        if not done:
            hint = f"; {where[i]}" if where else ""
            raise RuntimeError(
                f"role rollout: {backend} engine {engine} did not start within {timeout_s:.0f} s "
                f"(trainer.remote_timeout_s){hint}"
            )
        try:
            info.append(ray.get(ref))
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            cause = [ln for ln in str(e).strip().splitlines() if ln.strip()][-1:] or [type(e).__name__]
            raise RuntimeError(f"role rollout: {backend} engine {engine} failed to start: {cause[0]}") from e
    return info


def start_rollout_engines(
    realized: Any, spec: ExperimentSpec, model_path: str, env: dict[str, str] | None, *, start: bool = True
) -> RolloutEngineGroup:
    """Start ``spec.rollout.num_engines`` engines of ``spec.rollout.backend`` in the rollout role's bundles. With
    ``start=False`` (the rehearsal) the vLLM actors are placed but no engine is built (nothing touches a device)."""
    timeout = spec.trainer.remote_timeout_s
    if spec.rollout.backend == "hf":
        from rlhf.workers.rollout_worker import HFRolloutWorker

        group = realized.create_group(
            "rollout",
            HFRolloutWorker,
            model_path,
            spec.hardware.accelerator,
            spec.trainer.precision,
            num_actors=spec.rollout.num_engines,
            env=env,
        )
        info = _wait_ready("hf", group.actors, timeout_s=timeout)
        group.record_pids([i["pid"] for i in info])
        return RolloutEngineGroup("hf", group.actors, info, 1, group, timeout_s=timeout)
    respawners, placements = _vllm_starters(realized, spec, model_path, env)
    actors = [begin() for begin in respawners]
    started = RolloutEngineGroup(
        "vllm",
        actors,
        [],
        spec.rollout.tensor_parallel_size,
        respawners=respawners,
        placements=placements,
        timeout_s=timeout,
    )
    started.where = [_needs(realized, spec, p) for p in placements]
    if start:
        started.info = _wait_ready("vllm", actors, timeout_s=timeout, where=started.where)
    return started


def _needs(realized: Any, spec: ExperimentSpec, p: EnginePlacement) -> str:
    """What engine ``p`` asks Ray for and what its bundles have free now (for a bounded wait's message)."""
    from rlhf.launch.realize import bundle_free

    slots = realized.slots[realized.placement("rollout").group]
    parts = [f"the engine actor needs CPU {p.actor_cpus:g}, GPU {p.actor_gpus:g} in bundle {p.actor_bundle}"]
    if p.worker_gpus is not None:
        parts.append(f"each of its {len(p.bundles)} TP workers GPU {p.worker_gpus:g} in bundles {list(p.bundles)}")
    try:
        free = {b: bundle_free(slots.pg, b) for b in dict.fromkeys(p.bundles)}
        parts.append("free there: " + ", ".join(f"bundle {b} {f}" for b, f in free.items()))
    except Exception:  # noqa: BLE001 - the message is a hint; the cluster may be gone
        pass
    return "; ".join(parts)


def _vllm_starters(
    realized: Any, spec: ExperimentSpec, model_path: str, env: dict[str, str] | None
) -> tuple[list[Any], list[EnginePlacement]]:
    """One callable per engine that starts it in its bundles (called again to restart it), and the placements;
    every share is claimed in the ledger first (an over-booked bundle is refused before anything starts)."""
    from functools import partial

    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlhf.launch.vllm_actor import start_vllm_rollout_actor, vllm_runtime_env

    ro = spec.rollout
    placement = realized.placement("rollout")
    slots = realized.slots[placement.group]
    cpu = spec.hardware.accelerator == "cpu"
    placements = engine_placements(placement.engine_bundles, slots.bundle_order, slots.group.bundle, placement.fraction)
    ledger = getattr(realized, "ledger", None)
    if ledger is not None:
        for p in placements:
            for label, b, resources in p.claims():
                ledger.claim(label, placement.group, b, resources)
    starters = []
    for p in placements:
        kwargs: dict[str, Any] = {
            "tensor_parallel_size": ro.tensor_parallel_size,
            "gpu_memory_utilization": ro.gpu_memory_utilization,
            "enforce_eager": ro.enforce_eager or cpu,
            "max_model_len": spec.data.max_len,
            "seed": spec.seed + p.engine,
            "enable_sleep": ro.enable_sleep and not cpu,
            "dtype": "float32" if cpu else "bfloat16",
        }
        if ro.max_num_seqs:
            kwargs["max_num_seqs"] = ro.max_num_seqs
        if ro.tensor_parallel_size > 1 and not cpu:
            # vLLM's Ray executor (OpenRLHF: "ray" for TP > 1, "uni" for TP 1); it reads the variables below.
            kwargs["distributed_executor_backend"] = "ray"
            kwargs["bundle_indices"] = list(p.bundles)
            kwargs["per_worker_gpus"] = p.worker_gpus
        extra = {**realized.worker_env(), **faults.env()}
        if cpu:
            kwargs["cpu_kvcache_gib"] = float(ro.cpu_kv_cache_gb)
            threads = cpu_engine_threads(p.actor_cpus, env, ro.async_mode)
            runtime_env = vllm_runtime_env(cpu_threads=threads, extra_env=extra)
        else:
            runtime_env = vllm_runtime_env(cpu_threads=None, extra_env=extra)
        starters.append(
            partial(
                start_vllm_rollout_actor,
                model_path,
                runtime_env=runtime_env,
                num_cpus=p.actor_cpus,
                num_gpus=p.actor_gpus,
                options={
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(
                        placement_group=slots.pg,
                        placement_group_bundle_index=p.actor_bundle,
                        # vLLM's executor finds the group through the actor (ray.util.get_current_placement_group)
                        placement_group_capture_child_tasks=True,
                    )
                },
                **kwargs,
            )
        )
    return starters, placements
