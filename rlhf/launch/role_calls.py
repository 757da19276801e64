"""The calls a pipeline makes on a role's ranks, the same on every executor: Ray's placement groups
(rlhf.launch.realize.RoleGroup) and the driver's own process (rlhf.launch.local.LocalRoleGroup). A rank's method is
called as ``actor.method.remote(...)``, which both executors' actors answer with a future (Ray's ObjectRef, or the
local executor's rlhf.futures.LocalRef), and :meth:`RoleCalls.get` waits on them through rlhf.waits with the role's
bounds, so no pipeline knows which executor it runs on.

A role's ranks may not all be data-parallel: with sequence parallelism (the training backend's mesh, data x
sequence) the ranks of one sequence-parallel group split each sample between them and must all be given the same
micro-batches. The pipelines cut work per *data-parallel* rank (:attr:`RoleCalls.data_parallel` of them) and
:meth:`RoleCalls.run_per_rank` gives each data-parallel rank's argument to every rank of its group (contiguous ranks,
as rlhf.models.sequence_parallel.sp_groups forms them) and returns one result per group, so no pipeline repeats it."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from rlhf.errors import WorkerFailure
from rlhf.spec.mesh import Mesh


class WorkerError(WorkerFailure):
    """A worker of a role failed, died or hung; the message names the role and rank."""


class RoleCalls:
    """One role's ranks (``actors``, rank order) and the bounds on waiting for them."""

    role: str
    actors: list[Any]
    timeout_s: float | None = None  # trainer.remote_timeout_s
    startup_timeout_s: float | None = None  # trainer.startup_timeout_s (None: timeout_s)
    heartbeat_s: float | None = None  # trainer.heartbeat_timeout_s (None: no heartbeats)
    mesh: Mesh | None = None  # how the ranks split the work (use_mesh); None: every rank data-parallel

    def __len__(self) -> int:
        return len(self.actors)

    def use_mesh(self, mesh: Mesh) -> None:
        """The layout of this role's ranks (rlhf.spec.derive.role_mesh of its rank count), set once the group exists."""
        if mesh.ranks != len(self.actors):
            raise ValueError(
                f"role {self.role}: a mesh of {mesh.ranks} ranks ({mesh.describe()}) for {len(self)} ranks"
            )
        self.mesh = mesh

    @property
    def data_parallel(self) -> int:
        """The ranks that take different samples: how many shares the pipelines cut (every rank without a mesh)."""
        return self.mesh.data if self.mesh is not None else len(self.actors)

    @property
    def _ranks_per_share(self) -> int:
        return len(self.actors) // self.data_parallel

    def async_run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Futures of ``method(*args, **kwargs)`` on every rank."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def async_run_per_rank(self, method: str, per_rank: Sequence[Any], **kwargs: Any) -> list[Any]:
        """Futures of ``method(per_rank[d], **kwargs)`` on every rank of data-parallel rank d's group (ranks ``d*n``
        to ``d*n + n - 1``, ``n`` ranks per group; a tuple is spread as positional args): one future per rank."""
        if len(per_rank) != self.data_parallel:
            raise ValueError(
                f"role {self.role}: {len(per_rank)} per-rank arguments for {self.data_parallel} data-parallel ranks"
            )
        n = self._ranks_per_share
        refs = []
        for r, actor in enumerate(self.actors):
            arg = per_rank[r // n]
            args = arg if isinstance(arg, tuple) else (arg,)
            refs.append(getattr(actor, method).remote(*args, **kwargs))
        return refs

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.get(self.async_run_all(method, *args, **kwargs), method)

    def run_per_rank(self, method: str, per_rank: Sequence[Any], **kwargs: Any) -> list[Any]:
        """:meth:`async_run_per_rank`'s results, one per data-parallel rank (the first rank of each group: the ranks
        of a group compute the same results), after every rank answered."""
        results = self.get(self.async_run_per_rank(method, per_rank, **kwargs), method)
        return results[:: self._ranks_per_share]

    def start_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """:meth:`run_all` for a start-up call (loading a model), bounded by ``trainer.startup_timeout_s``."""
        return self.get(self.async_run_all(method, *args, **kwargs), method, startup=True)

    def get(self, refs: list[Any], what: str = "call", *, startup: bool = False) -> list[Any]:
        """Results in rank order. The first failure raises at once (naming role and rank), so a dead rank never
        leaves us waiting on the survivors stuck in a collective; a call taking longer than the group's timeout
        (``trainer.remote_timeout_s``; ``startup``: ``trainer.startup_timeout_s``, which bounds loading a model) is
        reported as hung, with :meth:`hint`, and a rank that leaves its heartbeat unanswered for
        ``trainer.heartbeat_timeout_s`` as stalled (rlhf.waits)."""
        from rlhf.waits import REMOTE_KEY, STARTUP_KEY, Call, wait

        actors = self.actors if len(refs) == len(self.actors) else [None] * len(refs)  # heartbeat: rank r's actor
        calls = [
            Call(ref, self.role, rank, hint=partial(self.hint, rank), actor=actors[rank])
            for rank, ref in enumerate(refs)
        ]
        start = self.timeout_s if self.startup_timeout_s is None else self.startup_timeout_s
        bound, key = (start, STARTUP_KEY) if startup else (self.timeout_s, REMOTE_KEY)
        return wait(calls, what, bound, timeout_key=key, error=WorkerError, heartbeat_s=self.heartbeat_s)

    def hint(self, rank: int) -> str:
        """What a failure message adds about rank ``rank`` (its log, where it runs); "" when nothing."""
        return ""

    def pid(self, rank: int) -> int | None:
        return getattr(self, "pids", {}).get(rank)

    def record_pids(self, pids: Sequence[int]) -> None:
        self.pids = dict(enumerate(pids))
