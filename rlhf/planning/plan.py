"""The plan: a pure function of the spec saying where every role runs and whether it fits.

Device groups (roles that share bundles) are laid out node-major over the cluster's devices. A group that fits in
one node never straddles two, so a tensor-parallel engine or a colocated set of roles stays on one node. Each
bundle is one device ({"GPU": 1, "CPU": c} on GPUs, {"CPU": c} on CPU hardware); colocated roles take an equal
fraction of it. No Ray, no torch: ``rlhf-plan`` answers in about a second.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from rlhf.planning.memory import GB, GroupMemory, SyncBytes, estimate, param_count, phases, sync_bytes
from rlhf.spec.derive import Derived, derive
from rlhf.spec.executor import choose
from rlhf.spec.registry import rollout_backend, train_backend
from rlhf.spec.schema import ExperimentSpec


@dataclass(frozen=True)
class DeviceGroup:
    """One Ray placement group: its roles share every bundle."""

    index: int
    roles: tuple[str, ...]
    nodes: tuple[int, ...]  # node index of each bundle, in bundle order (sorted by node)
    bundle: dict[str, float]  # resources of one bundle

    @property
    def size(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class RolePlacement:
    role: str
    group: int  # DeviceGroup index
    ranks: int  # actors (model roles: every rank of its mesh, Derived.mesh; rollout: engines)
    bundles_per_rank: int  # rollout: tensor_parallel_size; others 1
    fraction: float  # share of each bundle's device (1 / roles in the group)
    engine_bundles: tuple[tuple[int, ...], ...] = ()  # rollout: bundle indices of each engine's TP workers


@dataclass(frozen=True)
class NodeHost:
    """Host memory one node needs: what its ranks keep in host memory plus the weight sync's host staging."""

    node: int
    needed_gb: float
    capacity_gb: float
    parts_gb: dict[str, float] = field(default_factory=dict)  # what it is made of

    @property
    def fits(self) -> bool:
        return self.needed_gb <= self.capacity_gb


@dataclass(frozen=True)
class Plan:
    spec_name: str
    derived: Derived
    groups: tuple[DeviceGroup, ...]
    roles: dict[str, RolePlacement]
    memory: tuple[GroupMemory, ...]
    params: int
    warnings: tuple[str, ...] = field(default_factory=tuple)
    sync: SyncBytes | None = None
    hosts: tuple[NodeHost, ...] = ()
    # the training backend's own description (rlhf.backends.contract.training.TrainBackend.describe)
    training_engine: str = ""
    # the rollout backend's (rlhf.backends.contract.rollout.RolloutBackend.describe); "": no engines
    rollout_engine: str = ""
    # per device group: phase -> {"trained": parts, "rollout": parts} in device memory (rlhf.planning.memory.phases)
    phases: tuple[dict[str, dict[str, tuple[str, ...]]], ...] = ()
    executor: str = "ray"  # launch.executor resolved: ray | local (rlhf.spec.executor)
    executor_reason: str = ""  # why that executor, one line

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory) and all(h.fits for h in self.hosts)

    def verdict(self) -> str:
        if self.fits:
            return "fits"
        over = [m for m in self.memory if not m.fits]
        if over:
            worst = max(over, key=lambda m: m.overflow_gb)
            return (
                f"does not fit: devices of {'+'.join(worst.roles)} need {worst.peak_gb:.1f} GB of "
                f"{worst.capacity_gb:.0f} GB (over by {worst.overflow_gb:.1f} GB)"
            )
        h = max((h for h in self.hosts if not h.fits), key=lambda h: h.needed_gb - h.capacity_gb)
        parts = ", ".join(f"{k} {v:.1f}" for k, v in h.parts_gb.items() if v)
        return (
            f"does not fit: host memory of node {h.node} needs {h.needed_gb:.1f} GB of {h.capacity_gb:.0f} GB "
            f"(hardware.host_memory_gb; {parts})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec_name,
            "executor": self.executor,
            "executor_reason": self.executor_reason,
            "params": self.params,
            "training_engine": self.training_engine,
            "rollout_engine": self.rollout_engine,
            "derived": asdict(self.derived),
            "groups": [asdict(g) for g in self.groups],
            "roles": {k: asdict(v) for k, v in self.roles.items()},
            "memory": [
                {
                    "roles": list(m.roles),
                    "per_role_gb": {
                        r: {k: round(v / GB, 3) for k, v in asdict(s).items()} | {"device": round(s.device / GB, 3)}
                        for r, s in m.per_role.items()
                    },
                    "train_phase_gb": round(m.train_phase_gb, 3),
                    "rollout_phase_gb": round(m.rollout_phase_gb, 3),
                    "peak_gb": round(m.peak_gb, 3),
                    "capacity_gb": m.capacity_gb,
                    "kv_cache_gb": round(m.kv_cache_gb, 3),
                    "kv_cache_tokens": m.kv_cache_tokens,
                    "sync_phase_gb": round(m.sync_phase_gb, 3),
                    "fits": m.fits,
                }
                for m in self.memory
            ],
            "weight_sync": None
            if self.sync is None
            else {
                "route": self.sync.route,
                "bucket_gb": round(self.sync.bucket / GB, 3),
                "device_gb": {k: round(v / GB, 3) for k, v in self.sync.device.items()},
                "host_per_rank_gb": {k: round(v / GB, 3) for k, v in self.sync.host_per_rank.items()},
                "host_per_node_gb": round(self.sync.host_per_node / GB, 3),
            },
            "hosts": [asdict(h) | {"fits": h.fits} for h in self.hosts],
            "phases": [{p: {k: list(v) for k, v in parts.items()} for p, parts in g.items()} for g in self.phases],
            "fits": self.fits,
            "verdict": self.verdict(),
            "warnings": list(self.warnings),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _layout(spec: ExperimentSpec, derived: Derived) -> tuple[list[DeviceGroup], list[str]]:
    hw = spec.hardware
    per_node = hw.devices_per_node
    cpu = hw.accelerator == "cpu"
    cpus_per_bundle = max(hw.cpus_per_node // per_node, 1)
    bundle: dict[str, float] = {"CPU": float(cpus_per_bundle)} if cpu else {"GPU": 1.0, "CPU": float(cpus_per_bundle)}
    # Largest groups first, so big groups get whole nodes before small ones fragment them.
    order = sorted(range(len(derived.groups)), key=lambda i: -derived.devices[derived.groups[i][0]])
    node, used = 0, 0
    placed: dict[int, DeviceGroup] = {}
    warnings = []
    for i in order:
        roles = derived.groups[i]
        size = derived.devices[roles[0]]
        if size <= per_node and used + size > per_node:
            node, used = node + 1, 0  # keep a group that fits in one node inside one node
        nodes = []
        for _ in range(size):
            if used == per_node:
                node, used = node + 1, 0
            nodes.append(node)
            used += 1
        if nodes and nodes[-1] >= hw.nodes:
            warnings.append(f"{'+'.join(roles)} spills past the last node (node {nodes[-1]} of {hw.nodes})")
        placed[i] = DeviceGroup(index=i, roles=roles, nodes=tuple(nodes), bundle=dict(bundle))
    return [placed[i] for i in range(len(derived.groups))], warnings


def _roles(spec: ExperimentSpec, groups: list[DeviceGroup]) -> tuple[dict[str, RolePlacement], list[str]]:
    out: dict[str, RolePlacement] = {}
    warnings: list[str] = []
    for g in groups:
        fraction = 1.0 / len(g.roles)
        for role in g.roles:
            if role != "rollout":
                out[role] = RolePlacement(role, g.index, g.size, 1, fraction)
                continue
            tp = spec.rollout.tensor_parallel_size
            engines = []
            for e in range(spec.rollout.num_engines):
                idx = tuple(range(e * tp, (e + 1) * tp))
                if idx and idx[-1] < g.size:
                    engines.append(idx)
                    if len({g.nodes[b] for b in idx}) > 1:
                        warnings.append(f"rollout engine {e} spans nodes {sorted({g.nodes[b] for b in idx})}")
            out[role] = RolePlacement(role, g.index, len(engines), tp, fraction, tuple(engines))
    return out, warnings


def _hosts(
    spec: ExperimentSpec, groups: list[DeviceGroup], memory: list[GroupMemory], sync: SyncBytes | None
) -> tuple[NodeHost, ...]:
    """Host memory per node (see rlhf.planning.memory): each bundle's ranks' host bytes, the sync's host staging,
    and on CPU hardware the devices' own peaks (a CPU 'device' is host memory)."""
    hw = spec.hardware
    parts: dict[int, dict[str, float]] = {}
    for g, m in zip(groups, memory, strict=True):
        for node in g.nodes:
            p = parts.setdefault(node, {})
            for role, s in m.per_role.items():
                if s.host:
                    p["offloaded states"] = p.get("offloaded states", 0.0) + s.host
                if sync is not None and sync.host_per_rank.get(role):
                    p["weight-sync copies"] = p.get("weight-sync copies", 0.0) + sync.host_per_rank[role]
            if hw.accelerator == "cpu":
                p["CPU devices"] = p.get("CPU devices", 0.0) + m.peak_gb * GB
    if sync is not None and sync.host_per_node:
        policy = next((g for g in groups if "policy" in g.roles), None)
        node = policy.nodes[0] if policy is not None and policy.nodes else 0
        p = parts.setdefault(node, {})
        p["weight-sync staging"] = p.get("weight-sync staging", 0.0) + sync.host_per_node
    return tuple(
        NodeHost(
            node=n,
            needed_gb=sum(v for v in p.values()) / GB,
            capacity_gb=hw.host_memory_gb,
            parts_gb={k: v / GB for k, v in p.items()},
        )
        for n, p in sorted(parts.items())
    )


def plan(spec: ExperimentSpec) -> Plan:
    """The placement and memory plan of a (validated) spec."""
    derived = derive(spec)
    groups, w1 = _layout(spec, derived)
    roles, w2 = _roles(spec, groups)
    memory = estimate(spec, derived)
    params, _ = param_count(spec.model)
    sync = sync_bytes(spec, derived, params)
    executor = choose(spec, derived)
    return Plan(
        spec_name=spec.recipe or "(no recipe)",
        derived=derived,
        groups=tuple(groups),
        roles=roles,
        memory=tuple(memory),
        params=params,
        warnings=tuple(w1 + w2),
        sync=sync,
        hosts=_hosts(spec, groups, memory, sync),
        training_engine=train_backend(spec.trainer.backend).describe(spec),
        rollout_engine=rollout_backend(spec.rollout.backend).describe(spec) if "rollout" in roles else "",
        phases=tuple(phases(spec, g.roles) for g in groups),
        executor=executor.name,
        executor_reason=executor.reason,
    )
