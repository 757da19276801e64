"""The heartbeat every remote role answers (rlhf.waits asks it while the driver waits on the role): a Ray actor
class gets a concurrency group of its own for it (``LIVENESS``, Ray's public concurrency groups), so the answer
comes at once while the default group runs a long call, and only a process that no longer runs (SIGSTOP, a wedged
kernel, a host swapping) leaves it unanswered.

Imports the standard library only (Ray when a class becomes an actor): it runs in every actor's interpreter (the
vLLM venv too) and in the local executor's one process."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rlhf.backends.contract.rollout import LIVENESS

# The methods a role's class answers in the liveness group when it is a Ray actor (those it has of these).
LIVENESS_METHODS = ("heartbeat", "ping")


def remote_class(cls: type, **options: Any) -> Any:
    """``cls`` as a Ray actor class with the liveness concurrency group its ``heartbeat`` (and ``ping``) run in.
    The methods are marked here, when a class becomes a Ray actor, not where they are defined: the classes stay plain
    Python classes that the local executor hosts without importing Ray. (Ray's ``ray.method`` only sets an attribute
    on the function, which Ray alone reads; a wrapper would not do: Ray unwraps ``__wrapped__`` before reading it.)"""
    import ray

    for name in LIVENESS_METHODS:
        fn = getattr(cls, name, None)
        if fn is not None:
            ray.method(concurrency_group=LIVENESS)(fn)
    return ray.remote(concurrency_groups={LIVENESS: 1}, **options)(cls)


def answer(busy: tuple[str, float] | None = None, *, track: bool = True) -> dict[str, Any]:
    """A heartbeat's answer: pid, node (ip and Ray id), and with ``track`` the call running (``doing``: its name or
    None, ``doing_s``: for how long), from ``busy`` = (name, time.monotonic() at its start). Outside a Ray worker
    (the local executor) the node is this machine's loopback."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ctx = ray.get_runtime_context()
        node_ip, node_id = ray.util.get_node_ip_address(), ctx.get_node_id()
    else:
        node_ip, node_id = "127.0.0.1", None
    out: dict[str, Any] = {"pid": os.getpid(), "node_ip": node_ip, "node_id": node_id}
    if track:
        out["doing"] = busy[0] if busy else None
        out["doing_s"] = round(time.monotonic() - busy[1], 3) if busy else 0.0
    return out
