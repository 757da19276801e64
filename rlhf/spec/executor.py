"""Which executor runs a job (``launch.executor``), and why: a pure function of the spec.

    ray     the cluster's placement groups, one Ray actor per rank and per rollout engine (every multi-process job,
            every GPU recipe, and whatever needs restarts, heartbeats or a cluster address)
    local   the roles of a one-process job in the driver's own process: one rank per role, generation in the
            policy's process (``rollout.hf.in_policy``) or one engine that runs in this interpreter beside it; no
            cluster, no second interpreter (as TRL, and OpenRLHF's SFT, RM and DPO trainers, run such jobs)
    auto    local when the job is one process on this machine, else ray

A local run's fault story is the checkpoint and ``--resume`` (as TRL's): no in-run restarts, no heartbeats, so
``trainer.max_restarts`` and ``trainer.heartbeat_timeout_s`` default to null, which means 3 and 30 s on Ray and
nothing on local; setting either asks for Ray. What only Ray can host is listed by :func:`ray_only` with its key:
validation refuses it under ``launch.executor=local`` and ``auto`` picks Ray for it, naming the first reason.

Pure: no Ray, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlhf.spec.derive import Derived, derive
from rlhf.spec.registry import ROLLOUT_BACKENDS
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.train_backend_rules import beside_an_engine

EXECUTORS = ("auto", "ray", "local")
RAY_MAX_RESTARTS = 3  # trainer.max_restarts=null on the ray executor
RAY_HEARTBEAT_S = 30.0  # trainer.heartbeat_timeout_s=null on the ray executor


@dataclass(frozen=True)
class Blocker:
    """One thing the local executor cannot host: the key that asks for it, its value, and why."""

    key: str
    value: Any
    why: str

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.why}"


@dataclass(frozen=True)
class ExecutorChoice:
    name: str  # "local" | "ray"
    reason: str  # one line: why this executor

    def line(self) -> str:
        return f"executor: {self.name} ({self.reason})"


def ray_only(spec: ExperimentSpec, d: Derived | None = None) -> list[Blocker]:
    """What in ``spec`` only the Ray executor can host, each with the key that asks for it (empty: the job is one
    process)."""
    d = d or derive(spec)
    out: list[Blocker] = []
    if spec.ray.address:
        out.append(Blocker("ray.address", spec.ray.address, "attaches to a Ray cluster"))
    if spec.hardware.nodes > 1:
        out.append(Blocker("hardware.nodes", spec.hardware.nodes, "several nodes are several processes"))
    for role in d.roles:
        n = d.devices.get(role, 1)
        if role != "rollout" and n > 1:
            out.append(
                Blocker(
                    f"placement.devices.{role}",
                    n,
                    f"{n} {role} ranks, and one process holds one (the ranks come from this key, or else from "
                    "hardware.devices_per_node x hardware.nodes)",
                )
            )
    if "rollout" in d.roles and not generates_in_policy(spec):
        entry = ROLLOUT_BACKENDS.get(spec.rollout.backend)
        if entry is not None and not entry.in_process:
            out.append(
                Blocker("rollout.backend", spec.rollout.backend, "its engines run in an interpreter of their own")
            )
        elif spec.rollout.num_engines > 1:
            out.append(Blocker("rollout.num_engines", spec.rollout.num_engines, "one engine beside the policy at most"))
        out += [Blocker(key, value, why) for key, value, why in beside_an_engine(spec)]
    if spec.trainer.max_restarts:
        out.append(Blocker("trainer.max_restarts", spec.trainer.max_restarts, "in-run restarts replace processes"))
    if spec.trainer.heartbeat_timeout_s is not None:
        out.append(
            Blocker("trainer.heartbeat_timeout_s", spec.trainer.heartbeat_timeout_s, "heartbeats watch other processes")
        )
    return out


def choose(spec: ExperimentSpec, d: Derived | None = None) -> ExecutorChoice:
    """The executor of ``spec`` (``launch.executor``, ``auto`` resolved) and why."""
    asked = spec.launch.executor
    if asked == "ray":
        return ExecutorChoice("ray", "launch.executor=ray")
    blockers = ray_only(spec, d)
    if asked == "local":  # validation refuses a local job with blockers: this only names the choice
        return ExecutorChoice("local", "launch.executor=local")
    if blockers:
        return ExecutorChoice("ray", f"auto: {blockers[0]}")
    return ExecutorChoice("local", "auto: one process on this machine; launch.executor=ray for a Ray cluster")


def local_problems(spec: ExperimentSpec, d: Derived | None = None) -> list[tuple[str, Any, str]]:
    """(key, value, fix) for each thing ``launch.executor=local`` cannot host (validation's rule)."""
    if spec.launch.executor != "local":
        return []
    return [
        (b.key, b.value, f"launch.executor=local cannot host it: {b.why}; use launch.executor=ray (or auto)")
        for b in ray_only(spec, d)
    ]


def max_restarts(spec: ExperimentSpec) -> int:
    """``trainer.max_restarts`` as the chosen executor reads it (null: 3 on Ray, 0 on local)."""
    if spec.trainer.max_restarts is not None:
        return spec.trainer.max_restarts
    return RAY_MAX_RESTARTS if choose(spec).name == "ray" else 0


def heartbeat_s(spec: ExperimentSpec) -> float | None:
    """``trainer.heartbeat_timeout_s`` as the chosen executor reads it (null: 30 s on Ray, none on local)."""
    if spec.trainer.heartbeat_timeout_s is not None:
        return spec.trainer.heartbeat_timeout_s
    return RAY_HEARTBEAT_S if choose(spec).name == "ray" else None
