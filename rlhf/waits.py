"""Waiting for remote calls with a deadline, and what a failure says: one helper for every layer that waits on Ray
(the role groups' calls in rlhf.launch.realize, the engines' start-up in rlhf.launch.rollout, generation in
rlhf.pipelines.rollout_engines, the weight sync in rlhf.pipelines.weight_sync). Here, beside rlhf.errors, because
launch and pipelines both use it and neither may import the other's modules from below.

Every failure names who (``Call.label``: role and rank, or the engine), what it was waiting for (``what``), and,
when there is one, the hint the caller attached (its log, what it needs and what its bundle has free):

    died     the process is gone (Ray's RayActorError)        "<label> died during <what>: <Ray's first line>"
    failed   the call raised                                   "<label> failed in <what>: <the remote error>"
    hung     no answer before the deadline                     "<label> did not finish <what> within T s (<key>)"
    checksum the call raised rlhf's ChecksumMismatch (weight sync: a received tensor differs from what was sent)

A :class:`rlhf.errors.UserError` raised remotely is re-raised as it is (the user's to fix, not a worker failure).
Nothing here imports Ray until a wait runs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlhf.errors import UserError, WorkerFailure


@dataclass(frozen=True)
class Call:
    """One awaited remote call: its ObjectRef and who answers it."""

    ref: Any  # ray.ObjectRef
    role: str  # the role whose process answers ("policy", "rollout", ...)
    rank: int | None = None  # its rank in the role group, or the engine's index; None: not one process
    label: str = ""  # how messages name it (default "role <role> rank <rank>")
    hint: Callable[[], str] | str = ""  # appended to a failure ("; its log: ..."), computed only then

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        return f"role {self.role}" + ("" if self.rank is None else f" rank {self.rank}")

    def hint_text(self) -> str:
        try:
            text = self.hint() if callable(self.hint) else self.hint
        except Exception:  # noqa: BLE001 - a hint is best effort (the cluster may be gone)
            return ""
        return f"; {text}" if text else ""


def remote_cause(e: BaseException) -> str:
    """The remote exception's own line (a Ray task error carries the remote traceback; its last line is the
    remote exception), or the first line of Ray's message for a dead actor."""
    import ray

    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    return lines[0] if isinstance(e, ray.exceptions.RayActorError) else lines[-1]


def _user_error(e: BaseException) -> UserError | None:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, UserError) else None


def wait(
    calls: Sequence[Call],
    what: str,
    timeout_s: float | None,
    *,
    timeout_key: str = "trainer.remote_timeout_s",
    error: type[WorkerFailure] = WorkerFailure,
    grace_s: float = 0.0,
    blame_first: str | None = None,
) -> list[Any]:
    """The results of ``calls`` in their order, waiting at most ``timeout_s`` in all (None: no deadline).

    The first failure raises ``error(message, role=, rank=, kind=)`` at once (so a dead rank never leaves the
    driver waiting on survivors stuck in a collective with it); with ``grace_s`` the others get that long to fail
    too and the culprit is chosen among all failures: a dead process before one that raised because of it, then
    calls of role ``blame_first`` before the others (the weight sync blames an engine before the sender that lost
    it). Calls still unanswered at the deadline raise kind ``hung`` naming every one of them, the one blamed (of
    role ``blame_first`` if any) first."""
    import ray

    index = {c.ref: i for i, c in enumerate(calls)}
    pending = dict(index)
    results: dict[int, Any] = {}
    failures: list[tuple[int, BaseException]] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    grace_end: float | None = None
    while pending:
        now = time.monotonic()
        ends = [t for t in (deadline, grace_end) if t is not None]
        left = None if not ends else max(min(ends) - now, 0.0)
        done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        if not done:
            break  # the deadline (or, after a failure, the grace period) passed
        i = pending.pop(done[0])
        try:
            results[i] = ray.get(done[0])
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            user = _user_error(e)
            if user is not None:
                raise user from None
            failures.append((i, e))
            if grace_s <= 0:
                break
            grace_end = grace_end or time.monotonic() + grace_s
    if failures:
        raise _failure(calls, failures, what, error, blame_first)
    if pending:
        late = sorted((calls[i] for i in pending.values()), key=lambda c: (c.role != blame_first, calls.index(c)))
        first = late[0]
        names = ", ".join(c.name for c in late)
        raise error(
            f"{names} did not finish {what} within {timeout_s:.0f} s ({timeout_key}){first.hint_text()}",
            role=first.role,
            rank=first.rank,
            kind="hung",
        )
    return [results[i] for i in range(len(calls))]


def _failure(
    calls: Sequence[Call],
    failures: list[tuple[int, BaseException]],
    what: str,
    error: type[WorkerFailure],
    blame_first: str | None,
) -> WorkerFailure:
    import ray

    def order(f: tuple[int, BaseException]) -> tuple[int, int, int]:
        i, e = f
        return (not isinstance(e, ray.exceptions.RayActorError), calls[i].role != blame_first, i)

    i, e = min(failures, key=order)
    call = calls[i]
    cause = remote_cause(e)
    hint = call.hint_text()
    if isinstance(e, ray.exceptions.RayActorError):
        kind, text = "died", f"{call.name} died during {what}: {cause}{hint}"
    elif "ChecksumMismatch" in cause:
        kind, text = "checksum", f"{call.name} failed in {what}: {cause}{hint}"
    else:  # a bug or a bad input in the remote code: its traceback comes along
        kind, text = "failed", f"{call.name} failed in {what}: {cause}{hint}\n{e}"
    failure = error(text, role=call.role, rank=call.rank, kind=kind)
    failure.__cause__ = e
    return failure
