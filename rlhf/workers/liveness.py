"""The heartbeat every remote role answers (rlhf.waits asks it while the driver waits on the role): a Ray actor
class gets a concurrency group of its own for it (``LIVENESS``, Ray's public concurrency groups), so the answer
comes at once while the default group runs a long call, and only a process that no longer runs (SIGSTOP, a wedged
kernel, a host swapping) leaves it unanswered.

Imports Ray and the standard library only: it runs in every actor's interpreter (the vLLM venv too)."""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from rlhf.engines.protocol import LIVENESS


def remote_class(cls: type, **options: Any) -> Any:
    """``cls`` as a Ray actor class with the liveness concurrency group its ``heartbeat`` runs in."""
    return ray.remote(concurrency_groups={LIVENESS: 1}, **options)(cls)


def answer(busy: tuple[str, float] | None = None, *, track: bool = True) -> dict[str, Any]:
    """A heartbeat's answer: pid, node (ip and Ray id), and with ``track`` the call running (``doing``: its name or
    None, ``doing_s``: for how long), from ``busy`` = (name, time.monotonic() at its start)."""
    ctx = ray.get_runtime_context()
    out: dict[str, Any] = {"pid": os.getpid(), "node_ip": ray.util.get_node_ip_address(), "node_id": ctx.get_node_id()}
    if track:
        out["doing"] = busy[0] if busy else None
        out["doing_s"] = round(time.monotonic() - busy[1], 3) if busy else 0.0
    return out
