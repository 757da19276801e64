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

from rlhf.launch.memory import GB, GroupMemory, estimate, param_count
from rlhf.spec.derive import Derived, derive
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
    ranks: int  # actors (trained roles: data-parallel ranks; rollout: engines)
    bundles_per_rank: int  # rollout: tensor_parallel_size; others 1
    fraction: float  # share of each bundle's device (1 / roles in the group)
    engine_bundles: tuple[tuple[int, ...], ...] = ()  # rollout: bundle indices of each engine's TP workers


@dataclass(frozen=True)
class Plan:
    spec_name: str
    derived: Derived
    groups: tuple[DeviceGroup, ...]
    roles: dict[str, RolePlacement]
    memory: tuple[GroupMemory, ...]
    params: int
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory)

    def verdict(self) -> str:
        if self.fits:
            return "fits"
        worst = max(self.memory, key=lambda m: m.overflow_gb)
        return (
            f"does not fit: devices of {'+'.join(worst.roles)} need {worst.peak_gb:.1f} GB of "
            f"{worst.capacity_gb:.0f} GB (over by {worst.overflow_gb:.1f} GB)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec_name,
            "params": self.params,
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
                    "fits": m.fits,
                }
                for m in self.memory
            ],
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


def plan(spec: ExperimentSpec) -> Plan:
    """The placement and memory plan of a (validated) spec."""
    derived = derive(spec)
    groups, w1 = _layout(spec, derived)
    roles, w2 = _roles(spec, groups)
    memory = estimate(spec, derived)
    params, _ = param_count(spec.model)
    return Plan(
        spec_name=spec.recipe or "(no recipe)",
        derived=derived,
        groups=tuple(groups),
        roles=roles,
        memory=tuple(memory),
        params=params,
        warnings=tuple(w1 + w2),
    )
