"""From the pure Plan to Ray: the cluster, one placement group per device group, and actor groups per role.

Bundles are mapped to ranks sorted by node (rank r runs on the r-th bundle in node order), so the ranks of one node
are contiguous and LOCAL_RANK counts within the node. Colocated roles share the bundles with fractional resources
(the plan's ``fraction``). Waiting for a placement group is bounded: a cluster without the resources fails with the
roles and the missing resources named, never a silent hang.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlhf import faults
from rlhf.launch import actor_env
from rlhf.launch.cluster import Cluster, bundle_free, start_or_attach, worker_start_env
from rlhf.launch.ledger import BundleLedger
from rlhf.launch.ports import free_port
from rlhf.launch.realized import PlacementError, Realized
from rlhf.launch.reservation import adopt_reserved
from rlhf.launch.role_calls import RoleCalls, WorkerError  # noqa: F401 - WorkerError: re-exported
from rlhf.planning.plan import DeviceGroup, Plan, RolePlacement
from rlhf.spec.executor import heartbeat_s
from rlhf.spec.registry import ROLLOUT_BACKENDS, train_backend
from rlhf.spec.schema import ExperimentSpec

log = logging.getLogger(__name__)

LOCAL_PG_TIMEOUT_S = 30.0  # a private cluster has its resources at once, or never
ATTACHED_PG_TIMEOUT_S = 300.0  # an existing cluster may autoscale


@dataclass
class GroupSlots:
    """One placement group and the order its bundles are handed to ranks (sorted by node)."""

    group: DeviceGroup
    pg: Any  # ray.util.placement_group.PlacementGroup
    bundle_order: list[int]  # bundle index of rank r
    node_ips: list[str]  # node ip of rank r's bundle
    node_ids: list[str] = field(default_factory=list)  # Ray node id of rank r's bundle (simulated nodes share an ip)

    def _nodes(self) -> list[str]:
        return self.node_ids or self.node_ips

    def local_ranks(self) -> list[int]:
        """Rank r's index among the ranks on its node (counted per Ray node, so simulated nodes on one host count
        apart)."""
        seen: dict[str, int] = {}
        out = []
        for node in self._nodes():
            out.append(seen.get(node, 0))
            seen[node] = out[-1] + 1
        return out

    def local_world_sizes(self) -> list[int]:
        nodes = self._nodes()
        return [nodes.count(n) for n in nodes]


def _remote(actor_cls: type) -> Any:
    """``actor_cls`` as a Ray actor class; with the liveness concurrency group when it answers a heartbeat (the
    training ranks' rlhf.backends.shared.worker_base.BaseWorker does; rlhf.waits asks it)."""
    if hasattr(actor_cls, "heartbeat"):
        from rlhf.backends.shared.liveness import remote_class

        return remote_class(actor_cls)
    import ray

    return ray.remote(actor_cls)


def _node_ip_and_port() -> tuple[str, int]:
    import ray

    ip = ray.util.get_node_ip_address()
    return ip, free_port(ip)


def _missing_resources(bundles: list[dict[str, float]]) -> str:
    import ray

    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    avail, total = ray.available_resources(), ray.cluster_resources()
    parts = [f"{k}: need {v:g}, available {avail.get(k, 0):g} of {total.get(k, 0):g}" for k, v in sorted(need.items())]
    return "; ".join(parts)


def _create_placement_group(group: DeviceGroup, timeout_s: float) -> GroupSlots:
    import ray
    from ray.util.placement_group import placement_group, placement_group_table

    bundles = [dict(group.bundle) for _ in range(group.size)]
    pg = adopt_reserved(group)  # already placed by the ray_cluster launcher, which queued this job for it
    if pg is None:
        pg = placement_group(bundles, strategy="PACK", name=f"rlhf-{'+'.join(group.roles)}")
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        missing = _missing_resources(bundles)
        ray.util.remove_placement_group(pg)
        raise PlacementError(
            f"roles {'+'.join(group.roles)}: the Ray cluster cannot place {group.size} bundle(s) of {group.bundle} "
            f"within {timeout_s:.0f} s ({missing}); lower hardware.devices_per_node/placement.devices, or give "
            f"the cluster more resources (ray.num_cpus for a local cluster)"
        ) from None
    table = placement_group_table(pg)
    bundle_node = table["bundles_to_node_id"]
    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    node_rank = {node: i for i, node in enumerate(sorted(set(bundle_node.values()), key=lambda n: ips.get(n, n)))}
    order = sorted(range(group.size), key=lambda b: (node_rank[bundle_node[b]], b))
    return GroupSlots(
        group=group,
        pg=pg,
        bundle_order=order,
        node_ips=[ips.get(bundle_node[b], "") for b in order],
        node_ids=[bundle_node[b] for b in order],
    )


class RoleGroup(RoleCalls):
    """N Ray actors of one class for one role, one per rank, in the role's bundles (the calls: RoleCalls).

    Each actor gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (the rank-0 node) and MASTER_PORT in its environment,
    so ``deepspeed.init_distributed`` (or torch's env:// init) forms the group without further arguments.
    """

    def __init__(
        self,
        role: str,
        actor_cls: type,
        slots: GroupSlots,
        placement: RolePlacement,
        *args: Any,
        num_actors: int | None = None,
        env: dict[str, str] | None = None,
        accelerator: str = "cpu",
        driver_ip: str = "127.0.0.1",
        timeout_s: float | None = None,
        heartbeat_s: float | None = None,
        ledger: BundleLedger | None = None,
        startup_timeout_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role = role
        world = num_actors or placement.ranks
        if world > len(slots.bundle_order):
            raise PlacementError(
                f"role {role}: {world} ranks but its device group has {len(slots.bundle_order)} bundles"
            )
        bundle = slots.group.bundle
        cpus = bundle.get("CPU", 1.0) * placement.fraction
        gpus = bundle.get("GPU", 0.0) * placement.fraction
        master_addr, master_port = self._master(slots, driver_ip)
        # The rank's variables go into its process (rlhf.launch.actor_env), unless the class is already a Ray
        # actor class (it cannot take them there): then all of them through runtime_env.
        preset = hasattr(actor_cls, "remote")
        remote_cls = actor_cls if preset else _remote(actor_env.with_env(actor_cls))
        local_ranks = slots.local_ranks()
        local_sizes = slots.local_world_sizes()
        self.slots = slots
        self.bundles = [slots.bundle_order[rank] for rank in range(world)]
        self.resources = {"CPU": cpus, "GPU": gpus}
        self._ledger = ledger
        if ledger is not None:
            for rank in range(world):
                ledger.claim(f"{role} rank {rank}", slots.group.index, self.bundles[rank], self.resources)
        self.actors = []
        self._spawn_args: list[tuple[Any, dict[str, Any], tuple, dict[str, Any]]] = []
        self.timeout_s = timeout_s
        self.startup_timeout_s = timeout_s if startup_timeout_s is None else startup_timeout_s
        self.heartbeat_s = heartbeat_s
        for rank in range(world):
            rank_env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(local_ranks[rank]),
                "LOCAL_WORLD_SIZE": str(local_sizes[rank]),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RLHF_ROLE": role,
                # Threads per rank: its share of the bundle's CPUs (at least one).
                "OMP_NUM_THREADS": str(max(int(cpus), 1)),
                **faults.env(),
                **(env or {}),
            }
            if accelerator == "cpu":
                # Measured on the 2-core dev machine: with other busy processes, OpenMP's default spin-waiting makes
                # a 2-thread forward/backward 30-70x slower; passive waiting restores single-tenant speed.
                rank_env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            if accelerator == "gpu" and gpus < 1:
                # Colocated roles share a GPU: let each see the whole device, not only a Ray-assigned slice.
                rank_env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
            options = {
                "num_cpus": cpus,
                "num_gpus": gpus,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    placement_group=slots.pg, placement_group_bundle_index=slots.bundle_order[rank]
                ),
                "name": None,
                "max_restarts": 0,
            }
            at_start, in_process = (
                ({"env_vars": rank_env}, {}) if preset else actor_env.split({"env_vars": rank_env}, worker_start_env())
            )
            if at_start:
                options["runtime_env"] = at_start
            rank_kwargs = {**kwargs, actor_env.ENV_KWARG: in_process} if in_process else kwargs
            self._spawn_args.append((remote_cls, options, args, rank_kwargs))
            self.actors.append(remote_cls.options(**options).remote(*args, **rank_kwargs))

    @staticmethod
    def _master(slots: GroupSlots, driver_ip: str) -> tuple[str, int]:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        rank0_ip = slots.node_ips[0]
        if rank0_ip in (driver_ip, "127.0.0.1", ""):
            return (rank0_ip or "127.0.0.1"), free_port(rank0_ip or "127.0.0.1")
        # Rank 0 lives on another node: ask that node for a free port.
        probe = ray.remote(num_cpus=0)(_node_ip_and_port).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=slots.pg, placement_group_bundle_index=slots.bundle_order[0]
            )
        )
        return ray.get(probe.remote())

    def __len__(self) -> int:
        return len(self.actors)

    def hint(self, rank: int) -> str:
        """Its log, and what it needs in which bundle against what that bundle has free (for a failure message)."""
        needs = {k: v for k, v in self.resources.items() if v}
        where = (
            f"it needs {needs} in bundle {self.bundles[rank]} of placement group {'+'.join(self.slots.group.roles)}, "
            f"which has free {bundle_free(self.slots.pg, self.bundles[rank])}"
        )
        log = self.log_hint(rank)
        return f"{log.removeprefix('; ')}; {where}" if log else where

    def log_hint(self, rank: int) -> str:
        """'; its log: PATH' for the rank's Ray worker log, when it can be found."""
        from rlhf.launch.cluster import worker_log

        log = worker_log(self.pid(rank))
        return f"; its log: {log}" if log else ""

    def respawn(self, rank: int) -> Any:
        """Replace rank ``rank``'s actor (killed if still alive) by a new one in the same bundle with the same
        arguments; returns the new handle (its init methods still have to be called)."""
        import ray

        try:
            ray.kill(self.actors[rank], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        remote_cls, options, args, kwargs = self._spawn_args[rank]
        self.actors[rank] = remote_cls.options(**options).remote(*args, **kwargs)
        return self.actors[rank]

    def kill(self) -> None:
        """Leave the process group cleanly where possible, then end the actors."""
        import ray

        try:
            ray.get([a.shutdown.remote() for a in self.actors], timeout=30)
        except Exception:  # noqa: BLE001 - a dead or wedged actor is killed below anyway
            pass
        for a in self.actors:
            ray.kill(a, no_restart=True)
        if self._ledger is not None:
            for rank in range(len(self.actors)):
                self._ledger.release(f"{self.role} rank {rank}")
        self.actors = []


@dataclass
class RayExecutor:
    """Ray's side of a realized plan (rlhf.launch.realized.Realized): the cluster, one placement group per device
    group (``slots``, by the group's index) and the ledger of what the actors in each bundle claim."""

    cluster: Cluster
    slots: dict[int, GroupSlots]
    ledger: BundleLedger | None = None
    name: str = "ray"

    def worker_env(self) -> dict[str, str]:
        """The cluster's network settings, for every actor of the job."""
        return self.cluster.actor_env()

    def create_group(
        self,
        realized: Realized,
        role: str,
        placement: RolePlacement,
        actor_cls: type,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        env: dict[str, str],
    ) -> RoleGroup:
        """One Ray actor per rank of ``role``, in its device group's bundles."""
        self.cluster.wait_warm()
        spec = realized.spec
        return RoleGroup(
            role,
            actor_cls,
            self.slots[placement.group],
            placement,
            *args,
            env={**self.worker_env(), **env},
            accelerator=spec.hardware.accelerator,
            timeout_s=spec.trainer.remote_timeout_s,
            startup_timeout_s=spec.trainer.startup_s,
            heartbeat_s=heartbeat_s(spec),
            driver_ip=self.cluster.node_ip,
            ledger=self.ledger,
            **kwargs,
        )

    def start_rollout(self, realized: Realized, model_path: str, env: dict[str, str] | None, start: bool) -> Any:
        from rlhf.launch.rollout import start_rollout_engines

        self.cluster.wait_warm()
        return start_rollout_engines(realized, realized.spec, model_path, env, start=start)

    def restart_rollout_engine(self, started: Any, engine: int) -> Any:
        from rlhf.launch.rollout import restart_engine

        return restart_engine(started, engine)

    def actors_ended(self) -> None:
        if self.ledger is not None:
            self.ledger.claims.clear()

    def shutdown(self) -> None:
        """Remove the placement groups, stop a private cluster."""
        import ray

        if ray.is_initialized():
            for s in self.slots.values():
                try:
                    ray.util.remove_placement_group(s.pg)
                except Exception:  # noqa: BLE001 - already gone with its cluster
                    pass
        self.cluster.shutdown()


def realize(spec: ExperimentSpec, plan: Plan, *, timeout_s: float | None = None) -> Realized:
    """Start or attach to the Ray cluster and create one placement group per device group of ``plan``."""
    need_cpus = sum(int(g.bundle.get("CPU", 0)) * g.size for g in plan.groups)
    need_gpus = sum(int(g.bundle.get("GPU", 0)) * g.size for g in plan.groups)
    cluster = start_or_attach(
        spec.ray,
        num_cpus=need_cpus,
        num_gpus=need_gpus if need_gpus else None,
        preload=preload_modules(spec),
        warm=warm_count(spec, plan),
    )
    timeout = timeout_s or (ATTACHED_PG_TIMEOUT_S if spec.ray.address else LOCAL_PG_TIMEOUT_S)
    slots: dict[int, GroupSlots] = {}
    try:
        for g in plan.groups:
            slots[g.index] = _create_placement_group(g, timeout)
    except BaseException:
        Realized(spec, plan, RayExecutor(cluster, slots)).shutdown()
        raise
    log.info("placement groups ready: %s", ", ".join("+".join(s.group.roles) for s in slots.values()))
    return Realized(spec, plan, RayExecutor(cluster, slots, ledger_of(plan)))


def preload_modules(spec: ExperimentSpec, *, own_process: bool = False) -> tuple[str, ...]:
    """What a private cluster's idle workers import before an actor takes them (rlhf.launch.worker_preload). On
    CPU: torch, transformers, the model's code (``model.architecture``; a model folder of another architecture
    only loses the head start) and the engines' modules, DeepSpeed with them when it trains. With GPUs only torch:
    DeepSpeed's accelerator probe and the model code's attention checks ask CUDA for its devices, which fixes the
    devices a process sees before Ray has set CUDA_VISIBLE_DEVICES for the actor it will host; ``own_process`` (the
    local executor's, whose devices are its own already): all of them on GPUs too."""
    if spec.hardware.accelerator != "cpu" and not own_process:
        return ("torch",)
    arch = spec.model.architecture
    modules = [
        "torch",
        "transformers",
        f"transformers.models.{arch}.modeling_{arch}",
        "rlhf.backends.rollout.hf.engine",
    ]
    modules += train_backend(spec.trainer.backend).preload_modules()
    return tuple(modules)


def warm_count(spec: ExperimentSpec, plan: Plan) -> int:
    """How many of the job's actors surely take an idle, preloaded worker: the trained roles' ranks (policy,
    critic) and the in-interpreter rollout engines. Roles that may run inside another's processes (reference,
    reward, teacher: rlhf.pipelines.role_set) are left out: an idle worker nobody takes costs its imports."""
    from rlhf.spec.rollout_backend_rules import generates_in_policy

    count = sum(plan.roles[r].ranks for r in ("policy", "critic") if r in plan.roles)
    if "rollout" in plan.roles and ROLLOUT_BACKENDS[spec.rollout.backend].in_process and not generates_in_policy(spec):
        count += plan.roles["rollout"].ranks  # rollout.hf.in_policy: the policy's ranks generate, no process
    return count


def ledger_of(plan: Plan) -> BundleLedger:
    """An empty ledger with every bundle of the plan's device groups."""
    return BundleLedger(
        capacity={(g.index, b): dict(g.bundle) for g in plan.groups for b in range(g.size)},
        names={g.index: "+".join(g.roles) for g in plan.groups},
    )
