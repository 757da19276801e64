"""A call's result in this process: the local executor's stand-in for Ray's ObjectRef (rlhf.launch.local).

A role of a one-process job runs on a thread of its own, as a Ray actor runs in a process of its own, so the
driver's calls come back as :class:`LocalRef` futures that a lane thread resolves; rlhf.waits waits on them with the
same deadlines and the same failure messages as on ObjectRefs. Nothing here imports Ray or torch.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

_CHANGED = threading.Condition()  # notified whenever any LocalRef resolves (one wait may watch several)


class LocalRef:
    """The future result of one call on a local role: a value, or the exception the call raised (with its
    traceback as text, as a Ray task error carries the remote one)."""

    __slots__ = ("_done", "_value", "_error", "_trace", "label")

    def __init__(self, label: str = "") -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._trace = ""
        self.label = label

    @classmethod
    def of(cls, fn: Callable[[], Any], label: str = "") -> LocalRef:
        """A ref resolved at once with ``fn()`` (or what it raised)."""
        ref = cls(label)
        ref.run(fn)
        return ref

    def run(self, fn: Callable[[], Any]) -> None:
        """Resolve this ref with ``fn()`` or what it raises."""
        try:
            value, error, trace = fn(), None, ""
        except BaseException as e:  # handed to whoever waits, as Ray hands a remote error to ray.get
            value, error, trace = None, e, "".join(traceback.format_exception(type(e), e, e.__traceback__))
        with _CHANGED:
            self._value, self._error, self._trace, self._done = value, error, trace, True
            _CHANGED.notify_all()

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        return self._error

    @property
    def trace(self) -> str:
        return self._trace

    def result(self, timeout_s: float | None = None) -> Any:
        """The value (raising what the call raised); TimeoutError when it is not done within ``timeout_s``."""
        if not wait_any([self], timeout_s):
            raise TimeoutError(f"{self.label or 'local call'} not done within {timeout_s} s")
        if self._error is not None:
            raise self._error
        return self._value


def wait_any(refs: Sequence[LocalRef], timeout_s: float | None) -> list[LocalRef]:
    """The refs of ``refs`` that are done, waiting until at least one is or ``timeout_s`` passes (None: no bound).
    The main thread's signal handlers still run while it waits (Ctrl-C, SIGTERM)."""
    end = None if timeout_s is None else time.monotonic() + timeout_s
    with _CHANGED:
        while True:
            done = [r for r in refs if r.done]
            if done or not refs:
                return done
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return []
            # bounded slices: a signal handler runs between them even where a plain wait would not wake for it
            _CHANGED.wait(0.5 if left is None else min(left, 0.5))


def is_local(ref: Any) -> bool:
    return isinstance(ref, LocalRef)


def ray_actor() -> Any:
    """The ``ray`` module when this code runs inside a Ray actor, else None (the local executor's process, which
    may have no Ray at all, or a driver connected to a cluster for other work)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
        return ray
    return None


def put(value: Any) -> Any:
    """``value`` where a caller hands a large object on by reference: Ray's object store inside a Ray actor (the
    ref travels, the object stays), the object itself in the local executor's one process."""
    ray = ray_actor()
    return value if ray is None else ray.put(value)
