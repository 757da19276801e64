"""Where a vLLM engine's tensor-parallel workers go, and the device each one uses: the variables the engine actor
sets for vLLM's Ray executor, and vLLM's own rule applied to them.

The rule, as vLLM 0.32 implements it (vllm/v1/executor/ray_executor_v2.py ``RayExecutorV2._init_executor``, the
default Ray executor since VLLM_USE_RAY_V2_EXECUTOR_BACKEND=1; vllm/v1/executor/ray_utils.py
``initialize_ray_cluster``, ``get_bundles_for_indices`` and ``get_bundles_sorted_by_node``; vllm/envs.py for the
two variables), for ``distributed_executor_backend="ray"``:

1. The placement group is the engine actor's own (``ray.util.get_current_placement_group()``); every bundle may
   hold at most one GPU, and the group needs at least tensor_parallel_size GPU bundles.
2. ``VLLM_RAY_BUNDLE_INDICES`` ("3,4"): worker of rank r goes to bundle ``indices[r]``; as many indices as
   workers, no duplicates. Unset: the first tensor_parallel_size GPU bundles of the group, those on the engine
   actor's node first -- the same bundles for every engine of the group, which is why each engine must be told.
3. Each worker is a Ray actor with ``num_cpus=0`` and ``num_gpus=VLLM_RAY_PER_WORKER_GPUS`` (default 1.0): in a
   bundle that colocated trainers already share, 1.0 can never be scheduled (the run would hang).
4. Ray does not set the workers' CUDA_VISIBLE_DEVICES (vLLM sets ``RAY_EXPERIMENTAL_NOSET_*``); each worker's
   node GPU ids (Ray's assignment) are gathered, sorted per node, and worker i uses local rank = its position among
   its node's workers, i.e. the physical GPU ``sorted(node's ids)[local rank]``.

OpenRLHF sets both variables per engine the same way (openrlhf/trainer/ray/vllm_engine.py ``create_vllm_engines``
and ``RolloutRayActor._configure_device_env``). ``rlhf-plan --rehearse`` stands in for vLLM's executor with
:func:`assign_tp_devices`, placing one stand-in per worker with step 3's resources.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

BUNDLE_INDICES_ENV = "VLLM_RAY_BUNDLE_INDICES"
PER_WORKER_GPUS_ENV = "VLLM_RAY_PER_WORKER_GPUS"


def configure_device_env(
    env: MutableMapping[str, str], tensor_parallel_size: int, bundle_indices: Sequence[int] | None, gpus: float | None
) -> dict[str, str]:
    """Set, in the engine actor's environment, what vLLM's Ray executor reads (TP > 1 only): the engine's own
    bundles and each worker's GPU share; and drop the CUDA_VISIBLE_DEVICES Ray gave this GPU-less process, which
    vLLM would otherwise copy to its workers (OpenRLHF's RolloutRayActor._configure_device_env). Returns what it
    set."""
    if tensor_parallel_size <= 1 or bundle_indices is None:
        return {}
    if len(bundle_indices) != tensor_parallel_size or len(set(bundle_indices)) != len(bundle_indices):
        raise ValueError(
            f"engine bundles {list(bundle_indices)}: need {tensor_parallel_size} distinct bundle indices "
            f"(one per tensor-parallel worker)"
        )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = {BUNDLE_INDICES_ENV: ",".join(str(int(b)) for b in bundle_indices), PER_WORKER_GPUS_ENV: f"{gpus:g}"}
    env.update(out)
    return out


@dataclass(frozen=True)
class TPWorker:
    """One tensor-parallel worker of an engine as vLLM's executor places it."""

    rank: int
    bundle: int  # bundle index in the placement group
    node_id: str
    gpu_ids: tuple[int, ...]  # Ray's assignment to the worker actor (physical ids on its node)
    local_rank: int
    device: int  # the physical GPU it computes on
    gpus: float  # its Ray GPU share

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worker_bundles(env: MutableMapping[str, str] | dict[str, str], gpu_bundles_driver_first: Sequence[int], tp: int):
    """Step 2 of the module docstring: the bundle of each worker rank."""
    raw = env.get(BUNDLE_INDICES_ENV, "")
    if raw:
        indices = [int(x) for x in raw.split(",")]
        if len(indices) != tp or len(set(indices)) != len(indices):
            raise ValueError(f"{BUNDLE_INDICES_ENV}={raw}: must name {tp} distinct bundles (vLLM asserts this)")
        return indices
    return list(gpu_bundles_driver_first[:tp])


def assign_devices(placed: Sequence[tuple[int, str, Sequence[int]]], gpus: float) -> list[TPWorker]:
    """Step 4: ``placed[r] = (bundle, node id, Ray GPU ids)`` of worker rank r -> each worker's local rank and
    physical device."""
    node_workers: dict[str, list[int]] = {}
    node_ids: dict[str, list[int]] = {}
    for r, (_, node, ids) in enumerate(placed):
        node_workers.setdefault(node, []).append(r)
        node_ids.setdefault(node, []).extend(int(i) for i in ids)
    out = []
    for r, (bundle, node, ids) in enumerate(placed):
        local = node_workers[node].index(r)
        ordered = sorted(node_ids[node])
        out.append(TPWorker(r, int(bundle), node, tuple(int(i) for i in ids), local, ordered[local], gpus))
    return out


def _where() -> tuple[str, list[int], str | None]:
    """What Ray gave a worker placed like vLLM's RayWorkerProc (num_cpus=0, num_gpus=VLLM_RAY_PER_WORKER_GPUS, the
    engine's runtime environment): its node, GPU ids and CUDA_VISIBLE_DEVICES."""
    import ray

    ctx = ray.get_runtime_context()
    gpus = [int(i) for i in ctx.get_accelerator_ids().get("GPU", [])]
    return ctx.get_node_id(), gpus, os.environ.get("CUDA_VISIBLE_DEVICES")


def assign_tp_devices(tp: int, timeout_s: float) -> list[TPWorker]:
    """Stand in for vLLM's Ray executor inside the engine actor (steps 1-4 with Ray, no vLLM): one stand-in per
    worker, scheduled in the bundle vLLM would use with the resources vLLM's worker actor asks for (a Ray task
    rather than an actor: the same placement answer without a process per worker); a worker Ray cannot place within
    ``timeout_s`` is the hang a real start would have, reported with the bundle and what is free there."""
    import ray
    from ray.util.placement_group import get_current_placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = get_current_placement_group()
    if pg is None:
        raise RuntimeError("the engine actor is not in a placement group: vLLM would create one of its own")
    specs = pg.bundle_specs
    if any(b.get("GPU", 0) > 1 for b in specs):
        raise RuntimeError("a bundle holds more than one GPU: vLLM refuses such placement groups")
    table = placement_group_table(pg)["bundles_to_node_id"]
    here = ray.get_runtime_context().get_node_id()
    gpu_bundles = [i for i, b in enumerate(specs) if b.get("GPU", 0)]
    gpu_bundles.sort(key=lambda i: (0 if table[i] == here else 1, table[i]))
    if len(gpu_bundles) < tp:
        raise RuntimeError(f"tensor_parallel_size {tp} needs {tp} GPU bundles; the group has {len(gpu_bundles)}")
    bundles = worker_bundles(os.environ, gpu_bundles, tp)
    gpus = float(os.environ.get(PER_WORKER_GPUS_ENV, "1.0"))
    task = ray.remote(_where)
    refs = [
        task.options(
            num_cpus=0,
            num_gpus=gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=b),
        ).remote()
        for b in bundles
    ]
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        r = refs.index(pending[0])
        free = {
            k.split("_group_")[0]: v
            for k, v in ray.available_resources().items()
            if k.endswith(f"_group_{bundles[r]}_{pg.id.hex()}")
        }
        for ref in pending:
            ray.cancel(ref, force=True)
        raise RuntimeError(
            f"tensor-parallel worker {r} cannot be placed within {timeout_s:.0f} s: it needs GPU {gpus:g} "
            f"in bundle {bundles[r]}, which has free {free or 'nothing'} (vLLM would wait for ever)"
        )
    placed = [(b, node, ids) for b, (node, ids, _) in zip(bundles, ray.get(refs), strict=True)]
    return assign_devices(placed, gpus)
