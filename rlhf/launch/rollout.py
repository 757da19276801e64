"""Starting the rollout engines of a run in the plan's bundles: hf engines as one Ray actor group in the main venv,
vLLM engines as actors with the vLLM venv's interpreter (TP > 1: the engine actor takes no device, vLLM's own
workers take the TP bundles). The pipeline gets back a typed handle and never builds scheduling strategies."""

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
    started.info[engine] = _wait_ready(started.backend, [actor], first=engine)[0]
    return actor


def _wait_ready(backend: str, actors: list[Any], first: int = 0) -> list[dict[str, Any]]:
    import ray

    info = []
    for i, actor in enumerate(actors, start=first):
        try:
            info.append(ray.get(actor.ready.remote()))
        except ray.exceptions.RayActorError as e:
            cause = str(e).strip().splitlines()[-1]
            raise RuntimeError(f"role rollout: {backend} engine {i} failed to start: {cause}") from e
    return info


def start_rollout_engines(
    realized: Any, spec: ExperimentSpec, model_path: str, env: dict[str, str] | None
) -> RolloutEngineGroup:
    """Start ``spec.rollout.num_engines`` engines of ``spec.rollout.backend`` in the rollout role's bundles."""
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
        info = _wait_ready("hf", group.actors)
        group.record_pids([i["pid"] for i in info])
        return RolloutEngineGroup("hf", group.actors, info, 1, group)
    respawners = _vllm_starters(realized, spec, model_path, env)
    actors = [start() for start in respawners]
    return RolloutEngineGroup(
        "vllm", actors, _wait_ready("vllm", actors), spec.rollout.tensor_parallel_size, respawners=respawners
    )


def _vllm_starters(realized: Any, spec: ExperimentSpec, model_path: str, env: dict[str, str] | None) -> list[Any]:
    """One callable per engine that starts it in its bundle (called again to restart it)."""
    from functools import partial

    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlhf.launch.vllm_actor import start_vllm_rollout_actor, vllm_runtime_env

    ro = spec.rollout
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
        extra = {**realized.worker_env(), **faults.env()}
        if cpu:
            kwargs["cpu_kvcache_gib"] = float(ro.cpu_kv_cache_gb)
            threads = cpu_engine_threads(num_cpus, env, ro.async_mode)
            runtime_env = vllm_runtime_env(cpu_threads=threads, extra_env=extra)
        else:
            runtime_env = vllm_runtime_env(cpu_threads=None, extra_env=extra)
        actors.append(
            partial(
                start_vllm_rollout_actor,
                model_path,
                runtime_env=runtime_env,
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
