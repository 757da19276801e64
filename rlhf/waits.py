"""Waiting for remote calls with a deadline, and what a failure says: one helper for every layer that waits on Ray
(the role groups' calls in rlhf.launch.realize, the engines' start-up in rlhf.launch.rollout, generation in
rlhf.pipelines.rollout_engines, the weight sync in rlhf.backends.weight_sync.driver). Here, beside rlhf.errors, because
launch and pipelines both use it and neither may import the other's modules from below.

Every failure names who (``Call.label``: role and rank, or the engine), what it was waiting for (``what``), and,
when there is one, the hint the caller attached (its log, what it needs and what its bundle has free):

    died     the process is gone (Ray's RayActorError)        "<label> died during <what>: <Ray's first line>"
    failed   the call raised                                   "<label> failed in <what>: <the remote error>"
    hung     no answer before the deadline                     "<label> did not finish <what> within T s (<key>)"
    checksum the call raised rlhf's ChecksumMismatch (weight sync: a received tensor differs from what was sent)
    stalled  its actor left a heartbeat unanswered              "<label> stalled during <what>: no answer to a
             for ``heartbeat_s`` (``trainer.heartbeat_timeout_s``)  heartbeat for T s (...); pid P on node N; its
                                                               last answer, A s ago, said it was doing X (for S s)"

The heartbeat: with ``heartbeat_s`` set, while calls are pending the actors behind them (``Call.actor``) are asked
``heartbeat()`` every few seconds; the actor answers it in a concurrency group of its own
(rlhf.backends.contract.rollout
LIVENESS), so a busy actor answers at once and only a process that no longer runs (SIGSTOP, a wedged kernel, a host
swapping) leaves it unanswered. An actor is held to it once it has answered one heartbeat (a process still starting
is bounded by the wait's deadline instead); a stalled actor is killed (Ray ends its process), which frees its bundle
and ends the collectives its peers wait in, and the failure is handled as a dead process's.

A :class:`rlhf.errors.UserError` raised remotely is re-raised as it is (the user's to fix, not a worker failure).
Nothing here imports Ray until a wait on Ray's calls runs."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlhf.errors import UserError, WorkerFailure
from rlhf.futures import LocalRef, is_local, wait_any

REMOTE_KEY = "trainer.remote_timeout_s"  # what a hung call's message names: the key that bounds it
STARTUP_KEY = "trainer.startup_timeout_s"  # ... for an actor's start-up (model load, engine build)


@dataclass(frozen=True)
class Call:
    """One awaited remote call: its ObjectRef and who answers it."""

    ref: Any  # ray.ObjectRef
    role: str  # the role whose process answers ("policy", "rollout", ...)
    rank: int | None = None  # its rank in the role group, or the engine's index; None: not one process
    label: str = ""  # how messages name it (default "role <role> rank <rank>")
    hint: Callable[[], str] | str = ""  # appended to a failure ("; its log: ..."), computed only then
    actor: Any = None  # the ray.actor.ActorHandle answering it, asked heartbeat() while it is pending (None: not)

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


# What each thread of the driver waits on now: (what, its calls still unanswered, since when). Read by the second
# Ctrl-C's message (rlhf.pipelines.interrupts), which names the worker the run was stuck on.
_WAITING: dict[int, tuple[str, Callable[[], list[Call]], float]] = {}


def waiting_on() -> str:
    """The calls the driver waits on now, for a message: each unanswered one named with what it runs, the ones whose
    actor left a heartbeat unanswered first (with how long, and its pid); '' when it waits on none."""
    now = time.monotonic()
    parts: list[tuple[float, str]] = []
    for what, pending, since in list(_WAITING.values()):
        for c in pending():
            last = _SEEN.get(c.actor) if c.actor is not None else None
            silent = now - max(last["_at"], since) if last is not None and c.actor in _SENT else 0.0
            if silent >= 1.0:
                text = f"{c.name} in {what} (no answer to a heartbeat for {silent:.0f} s, pid {last.get('pid', '?')})"
            else:
                text = f"{c.name} in {what} (for {now - since:.0f} s)"
            parts.append((-silent, text))
    shown = [t for _, t in sorted(parts)[:4]]
    more = f" and {len(parts) - 4} more" if len(parts) > 4 else ""
    return "; ".join(shown) + more


def wait(
    calls: Sequence[Call],
    what: str,
    timeout_s: float | None,
    *,
    timeout_key: str = REMOTE_KEY,
    error: type[WorkerFailure] = WorkerFailure,
    grace_s: float = 0.0,
    blame_first: str | None = None,
    heartbeat_s: float | None = None,
) -> list[Any]:
    """The results of ``calls`` in their order, waiting at most ``timeout_s`` in all (None: no deadline).

    The first failure raises ``error(message, role=, rank=, kind=)`` at once (so a dead rank never leaves the
    driver waiting on survivors stuck in a collective with it); with ``grace_s`` the others get that long to fail
    too and the culprit is chosen among all failures: a dead process before one that raised because of it, then
    calls of role ``blame_first`` before the others (the weight sync blames an engine before the sender that lost
    it). Calls still unanswered at the deadline raise kind ``hung`` naming every one of them, the one blamed (of
    role ``blame_first`` if any) first. With ``heartbeat_s``, an actor behind a pending call that leaves a heartbeat
    unanswered that long raises kind ``stalled`` at once (see the module's docstring). Calls on the local executor's
    roles (rlhf.futures.LocalRef) are waited for the same way, without heartbeats (they run in this process)."""
    if calls and all(is_local(c.ref) for c in calls):
        return _wait_local(calls, what, timeout_s, timeout_key, error, grace_s, blame_first)
    import ray

    index = {c.ref: i for i, c in enumerate(calls)}
    pending = dict(index)
    me = threading.get_ident()
    _WAITING[me] = (what, lambda: [calls[i] for i in list(pending.values())], time.monotonic())
    try:
        return _wait_ray(ray, calls, pending, what, timeout_s, timeout_key, error, grace_s, blame_first, heartbeat_s)
    finally:
        _WAITING.pop(me, None)


def _wait_ray(
    ray: Any,
    calls: Sequence[Call],
    pending: dict[Any, int],
    what: str,
    timeout_s: float | None,
    timeout_key: str,
    error: type[WorkerFailure],
    grace_s: float,
    blame_first: str | None,
    heartbeat_s: float | None,
) -> list[Any]:
    results: dict[int, Any] = {}
    failures: list[tuple[int, BaseException]] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    grace_end: float | None = None
    beat = _Heartbeat(calls, heartbeat_s) if heartbeat_s and any(c.actor is not None for c in calls) else None
    while pending:
        if beat is not None:
            stalled = beat.check([calls[i] for i in pending.values()])
            if stalled is not None:
                raise _stalled(stalled, what, error)
        now = time.monotonic()
        ends = [t for t in (deadline, grace_end) if t is not None]
        left = None if not ends else max(min(ends) - now, 0.0)
        step = left if beat is None else (beat.interval if left is None else min(left, beat.interval))
        done, _ = ray.wait(list(pending), num_returns=1, timeout=step)
        if not done:
            if step is not None and step == left:
                break  # the deadline (or, after a failure, the grace period) passed
            continue  # time for the next heartbeat
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
        raise _hung(calls, list(pending.values()), what, timeout_s, timeout_key, error, blame_first)
    return [results[i] for i in range(len(calls))]


def _hung(
    calls: Sequence[Call],
    pending: Sequence[int],
    what: str,
    timeout_s: float | None,
    timeout_key: str,
    error: type[WorkerFailure],
    blame_first: str | None,
) -> WorkerFailure:
    late = sorted((calls[i] for i in pending), key=lambda c: (c.role != blame_first, calls.index(c)))
    first = late[0]
    names = ", ".join(c.name for c in late)
    return error(
        f"{names} did not finish {what} within {timeout_s:.0f} s ({timeout_key}){first.hint_text()}",
        role=first.role,
        rank=first.rank,
        kind="hung",
    )


def _wait_local(
    calls: Sequence[Call],
    what: str,
    timeout_s: float | None,
    timeout_key: str,
    error: type[WorkerFailure],
    grace_s: float,
    blame_first: str | None,
) -> list[Any]:
    """:func:`wait` for the local executor's calls: the same deadline, grace and blame; a call that raised is
    ``failed`` (``checksum`` for a weight-sync checksum mismatch) with its traceback, a UserError re-raised as is.
    A call still running at the deadline is ``hung``: its thread cannot be stopped, so the run stops (a local run
    restarts nothing)."""
    refs: list[LocalRef] = [c.ref for c in calls]
    pending = dict.fromkeys(range(len(calls)))
    me = threading.get_ident()
    _WAITING[me] = (what, lambda: [calls[i] for i in list(pending)], time.monotonic())
    try:
        return _wait_local_calls(calls, refs, pending, what, timeout_s, timeout_key, error, grace_s, blame_first)
    finally:
        _WAITING.pop(me, None)


def _wait_local_calls(
    calls: Sequence[Call],
    refs: list[LocalRef],
    pending: dict[int, None],
    what: str,
    timeout_s: float | None,
    timeout_key: str,
    error: type[WorkerFailure],
    grace_s: float,
    blame_first: str | None,
) -> list[Any]:
    failures: list[int] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    grace_end: float | None = None
    while pending:
        ends = [t for t in (deadline, grace_end) if t is not None]
        left = None if not ends else max(min(ends) - time.monotonic(), 0.0)
        done = wait_any([refs[i] for i in pending], left)
        if not done:
            break  # the deadline (or, after a failure, the grace period) passed
        for i in [i for i in pending if refs[i].done]:
            del pending[i]
            e = refs[i].error
            if isinstance(e, UserError):
                raise e
            if e is not None:
                failures.append(i)
        if failures:
            if grace_s <= 0:
                break
            grace_end = grace_end or time.monotonic() + grace_s
    if failures:
        i = min(failures, key=lambda j: (calls[j].role != blame_first, j))
        call, ref = calls[i], refs[i]
        lines = [ln for ln in ref.trace.strip().splitlines() if ln.strip()]
        cause = lines[-1] if lines else type(ref.error).__name__
        kind = "checksum" if "ChecksumMismatch" in cause else "failed"
        failure = error(
            f"{call.name} failed in {what}: {cause}{call.hint_text()}\n{ref.trace.rstrip()}",
            role=call.role,
            rank=call.rank,
            kind=kind,
        )
        failure.__cause__ = ref.error
        raise failure
    if pending:
        raise _hung(calls, list(pending), what, timeout_s, timeout_key, error, blame_first)
    return [r.result() for r in refs]


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


# The last heartbeat answer of every actor seen (keyed by its handle): a stalled one is named with it (pid, node,
# what it was doing), and only an actor that answered once is held to the heartbeat. Bounded: old entries go first.
_SEEN: dict[Any, dict[str, Any]] = {}
_SEEN_MAX = 4096
_SENT: dict[Any, Any] = {}  # actor -> the ObjectRef of its outstanding heartbeat


@dataclass
class _Stalled:
    call: Call
    silent_s: float  # since its last sign of life (its last answer, or the start of this wait)
    timeout_s: float
    last: dict[str, Any]  # its last answer


class _Heartbeat:
    """The heartbeats of one wait: one outstanding ``heartbeat()`` per actor at a time, a new one ``interval`` s
    after the previous answer. An actor seen alive before is stalled when its heartbeat is outstanding and nothing
    was heard from it for ``timeout_s`` (since its last answer, or since this wait began when that was earlier)."""

    def __init__(self, calls: Sequence[Call], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.interval = min(max(timeout_s / 5, 0.2), 5.0)
        self.started = time.monotonic()
        self.sent = _SENT  # an answer to an earlier wait's heartbeat still counts (and none is sent twice)
        self.next_at: dict[Any, float] = {}
        for c in calls:  # an actor never seen is asked at once (its pid and node for a later message)
            if c.actor is not None and c.actor not in self.next_at:
                self.next_at[c.actor] = self.started + (self.interval if c.actor in _SEEN else 0.0)

    def check(self, pending: Sequence[Call]) -> _Stalled | None:
        import ray

        if self.sent:
            refs = {ref: actor for actor, ref in self.sent.items()}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0, fetch_local=False)
            for ref in ready:
                actor = refs[ref]
                del self.sent[actor]
                try:
                    _remember(actor, ray.get(ref))
                except Exception:  # noqa: BLE001 - a dead actor: its call says so (kind died)
                    self.next_at[actor] = math.inf
                    continue
                self.next_at[actor] = time.monotonic() + self.interval
        now = time.monotonic()
        for c in pending:
            actor = c.actor
            if actor is None:
                continue
            if actor in self.sent:
                last = _SEEN.get(actor)
                if last is not None:
                    silent = now - max(last["_at"], self.started)
                    if silent > self.timeout_s:
                        return _Stalled(c, silent, self.timeout_s, last)
            elif now >= self.next_at.get(actor, now):
                try:
                    self.sent[actor] = actor.heartbeat.remote()
                except AttributeError:  # an actor class without a heartbeat (a test's, a user's): not watched
                    self.next_at[actor] = math.inf
        return None


def _remember(actor: Any, answer: dict[str, Any]) -> None:
    _SEEN.pop(actor, None)
    _SEEN[actor] = {**answer, "_at": time.monotonic()}
    while len(_SEEN) > _SEEN_MAX:
        del _SEEN[next(iter(_SEEN))]
    while len(_SENT) > _SEEN_MAX:
        del _SENT[next(iter(_SENT))]


def last_heartbeat(actor: Any) -> dict[str, Any] | None:
    """The last heartbeat answer of ``actor`` a wait saw (pid, node_ip, node_id, doing, doing_s), or None."""
    last = _SEEN.get(actor)
    return None if last is None else {k: v for k, v in last.items() if k != "_at"}


def _stalled(s: _Stalled, what: str, error: type[WorkerFailure]) -> WorkerFailure:
    import ray

    last = s.last
    was = f"; its last answer, {time.monotonic() - last['_at']:.0f} s ago"
    if "doing" not in last:  # the actor does not say (a training rank: the call waited on is what it runs)
        pass
    elif last["doing"]:
        was += f", said it was doing {last['doing']} (for {last.get('doing_s', 0):.0f} s)"
    else:
        was += ", said it was idle"
    node = last.get("node_ip") or "?"
    if last.get("node_id"):
        node += f" ({str(last['node_id'])[:8]})"
    text = (
        f"{s.call.name} stalled during {what}: no answer to a heartbeat for {s.silent_s:.0f} s "
        f"(trainer.heartbeat_timeout_s={s.timeout_s:g}); pid {last.get('pid', '?')} on node {node}{was}; "
        f"its process is killed{s.call.hint_text()}"
    )
    try:  # Ray ends the stopped process (SIGKILL from its node's raylet), so its peers' collectives fail too
        ray.kill(s.call.actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    return error(text, role=s.call.role, rank=s.call.rank, kind="stalled")
