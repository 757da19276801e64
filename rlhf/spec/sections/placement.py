"""``placement.*``: which roles share devices, and how many each gets."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf.spec.keys import key


@dataclass(frozen=True)
class RoleDevices:
    """Devices per role; null: derived (colocated roles share their group's devices, the rest split evenly)."""

    policy: int | None = key(
        None, "devices (ranks) of the policy: data-parallel x trainer.sequence_parallel_size", ge=0
    )
    reference: int | None = key(None, "devices of the reference model", ge=0)
    teacher: int | None = key(None, "devices of the distillation teacher (algorithm=opd)", ge=0)
    critic: int | None = key(None, "devices of the critic", ge=0)
    reward: int | None = key(None, "devices of the reward model", ge=0)
    rollout: int | None = key(None, "devices of the rollout engines (num_engines x tensor_parallel_size)", ge=0)


@dataclass(frozen=True)
class PlacementSpec:
    """conf/placement/*.yaml: which roles share devices."""

    name: str = key("colocate_all", "placement option name (informational)", nonempty=True)
    colocate: list[list[str]] = key(
        factory=lambda: [["policy", "reference", "teacher", "critic", "reward", "rollout"]],
        doc="groups of roles that share the same bundles; roles in no group get their own",
    )
    devices: RoleDevices = field(default_factory=RoleDevices)
