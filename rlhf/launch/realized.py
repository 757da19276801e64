"""A plan realized: what the pipelines call to start a job's roles and engines, the same on every executor
(DESIGN.md, "Executors"): Ray's placement groups (rlhf.launch.realize.RayExecutor) or the driver's own process
(rlhf.launch.local.LocalExecutor). :class:`Realized` answers the plan's questions (where a role is, which roles share
devices or processes), keeps the groups it started and ends them in order; its ``executor`` starts them its own way.
So no pipeline, engine or weight-sync route knows which executor it runs on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rlhf.errors import UserError
from rlhf.launch.role_calls import RoleCalls
from rlhf.planning.plan import Plan, RolePlacement
from rlhf.spec.schema import ExperimentSpec


class PlacementError(UserError):
    """The plan or the cluster cannot hold a role where it was asked for."""


class Executor(Protocol):
    """How one executor starts a job's roles and engines (``launch.executor``)."""

    name: str  # "ray" | "local"

    def worker_env(self) -> dict[str, str]:
        """Environment every role and engine of the job gets on top of its own."""
        ...

    def create_group(
        self,
        realized: Realized,
        role: str,
        placement: RolePlacement,
        actor_cls: type,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        env: dict[str, str],
    ) -> RoleCalls:
        """``role``'s ranks of ``actor_cls(*args, **kwargs)`` where ``placement`` says (its share: the fused roles'
        added), with ``env`` (the pipeline's for the role)."""
        ...

    def start_rollout(self, realized: Realized, model_path: str, env: dict[str, str] | None, start: bool) -> Any:
        """The rollout engines (rlhf.launch.rollout.RolloutEngineGroup); ``start=False``: placed, none built."""
        ...

    def restart_rollout_engine(self, started: Any, engine: int) -> Any:
        """Engine ``engine`` of ``started`` replaced by a fresh one, once ready (or a UserError where it cannot)."""
        ...

    def actors_ended(self) -> None:
        """Every role and engine of the job has ended: forget what they held (the devices stay)."""
        ...

    def shutdown(self) -> None:
        """Give back what the executor holds (placement groups and a private cluster; this process's variables)."""
        ...


@dataclass
class Realized:
    """The plan's roles, placed by ``executor``: ``create_group`` starts a role's ranks, ``start_rollout`` the
    engines; ``kill_actors`` ends them all (the executor keeps its devices, so they can start again),
    ``shutdown`` ends them and the executor."""

    spec: ExperimentSpec
    plan: Plan
    executor: Executor
    role_groups: list[Any] = field(default_factory=list)  # RoleCalls that also kill() (each executor's RoleGroup)
    rollout_groups: list[Any] = field(default_factory=list)  # rlhf.launch.rollout.RolloutEngineGroup

    def placement(self, role: str) -> RolePlacement:
        try:
            return self.plan.roles[role]
        except KeyError:
            raise PlacementError(f"role {role} is not in the plan (roles: {', '.join(self.plan.roles)})") from None

    def colocated(self, a: str, b: str) -> bool:
        """Whether roles a and b share the same bundles (the same device group)."""
        return self.placement(a).group == self.placement(b).group

    def can_fuse(self, role: str, other: str) -> bool:
        """Whether ``other`` can live in ``role``'s processes: same bundles, same number of ranks."""
        a, b = self.placement(role), self.placement(other)
        return a.group == b.group and a.ranks == b.ranks and b.bundles_per_rank == 1

    def worker_env(self) -> dict[str, str]:
        """Environment every actor of this job gets on top of its role's (Ray: the cluster's network settings)."""
        return self.executor.worker_env()

    def create_group(
        self,
        role: str,
        actor_cls: type,
        *args: Any,
        fused: Sequence[str] = (),
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> RoleCalls:
        """One actor per rank of ``role`` (``actor_cls(*args, **kwargs)``), in the role's bundles. Roles in
        ``fused`` run inside the same actors (see :meth:`can_fuse`); their resource shares are added to role's."""
        placement = self.placement(role)
        for other in fused:
            if not self.can_fuse(role, other):
                raise PlacementError(f"role {other} cannot share {role}'s processes (different devices or ranks)")
            placement = replace(placement, fraction=placement.fraction + self.placement(other).fraction)
        group = self.executor.create_group(self, role, placement, actor_cls, args, kwargs, env or {})
        self.role_groups.append(group)
        return group

    def start_rollout(self, model_path: str, env: dict[str, str] | None = None, *, start: bool = True) -> Any:
        """Start the rollout engines in the rollout role's bundles; a rlhf.launch.rollout.RolloutEngineGroup
        (``start=False``: the actors placed, no engine built; the rehearsal)."""
        started = self.executor.start_rollout(self, model_path, env, start)
        self.rollout_groups.append(started)
        return started

    def restart_rollout_engine(self, started: Any, engine: int) -> Any:
        """Replace rollout engine ``engine`` of ``started`` (a RolloutEngineGroup) by a fresh one in the same
        bundle; returns the new actor once it is ready."""
        return self.executor.restart_rollout_engine(started, engine)

    def kill_actors(self) -> None:
        """End every actor of the job (rollout engines, then role groups: each leaves its process group), keeping
        the executor's devices, so the job's actors can be started again (a restart after a training rank died)."""
        for r in self.rollout_groups:
            r.kill()
        self.rollout_groups.clear()
        for g in self.role_groups:
            g.kill()
        self.role_groups.clear()
        self.executor.actors_ended()

    def shutdown(self) -> None:
        """End every actor, then the executor."""
        try:
            self.kill_actors()
        finally:
            self.executor.shutdown()
