"""The calls a pipeline makes on a role's ranks, the same on every executor: Ray's placement groups
(rlhf.launch.realize.RoleGroup) and the driver's own process (rlhf.launch.local.LocalRoleGroup). A rank's method is
called as ``actor.method.remote(...)``, which both executors' actors answer with a future (Ray's ObjectRef, or the
local executor's rlhf.futures.LocalRef), and :meth:`RoleCalls.get` waits on them through rlhf.waits with the role's
bounds, so no pipeline knows which executor it runs on."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from rlhf.errors import WorkerFailure


class WorkerError(WorkerFailure):
    """A worker of a role failed, died or hung; the message names the role and rank."""


class RoleCalls:
    """One role's ranks (``actors``, rank order) and the bounds on waiting for them."""

    role: str
    actors: list[Any]
    timeout_s: float | None = None  # trainer.remote_timeout_s
    startup_timeout_s: float | None = None  # trainer.startup_timeout_s (None: timeout_s)
    heartbeat_s: float | None = None  # trainer.heartbeat_timeout_s (None: no heartbeats)

    def __len__(self) -> int:
        return len(self.actors)

    def async_run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Futures of ``method(*args, **kwargs)`` on every rank."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def async_run_per_rank(self, method: str, per_rank: Sequence[Any], **kwargs: Any) -> list[Any]:
        """Futures of ``method(per_rank[r], **kwargs)`` on rank r (a tuple is spread as positional args)."""
        if len(per_rank) != len(self.actors):
            raise ValueError(f"role {self.role}: {len(per_rank)} per-rank arguments for {len(self.actors)} ranks")
        refs = []
        for actor, arg in zip(self.actors, per_rank, strict=True):
            args = arg if isinstance(arg, tuple) else (arg,)
            refs.append(getattr(actor, method).remote(*args, **kwargs))
        return refs

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.get(self.async_run_all(method, *args, **kwargs), method)

    def run_per_rank(self, method: str, per_rank: Sequence[Any], **kwargs: Any) -> list[Any]:
        return self.get(self.async_run_per_rank(method, per_rank, **kwargs), method)

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
