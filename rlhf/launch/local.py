"""The local executor: a one-process job's roles in the driver's own process (``launch.executor``, chosen by
rlhf.spec.executor), with no cluster and no second interpreter.

The same role classes Ray would host (rlhf.workers) are built here, behind the handle the pipelines already use:
``realized.create_group`` returns a :class:`LocalRoleGroup` whose calls (rlhf.launch.role_calls.RoleCalls) answer
``actor.method.remote(...)`` with a future (rlhf.futures.LocalRef), and ``realized.start_rollout`` the same engine
group as on Ray. So no pipeline, engine or weight-sync route knows which executor it runs on.

Threads stand where Ray has processes (a "lane": one thread that runs its calls in order, as an actor runs its
calls): every training-side role (policy, reference, teacher, critic, reward) shares the one rank's lane, as roles
fused into one process do on Ray, and the rollout engine beside the policy has a lane of its own, so a weight sync
streams from one to the other as it does between two processes, and async generation overlaps training.

The rank's variables (RANK=0, WORLD_SIZE=1, MASTER_ADDR on loopback, its thread count, ``ray.runtime_env``) are set
in this process while the job runs and restored after it. What needs more than one process (ranks, engines in a
side environment, restarts, heartbeats) is Ray's; validation refuses it here (rlhf.spec.executor.ray_only).
"""

from __future__ import annotations

import importlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# transformers ends its own import by replacing its module object in sys.modules with a lazy one: a thread that
# imports from it while another thread is still in that import can be handed the replaced object and fail ("cannot
# import name ..."). Imported here, in the driver's thread, before the executor's threads and the data build beside
# them import from it at once (every rlhf pipeline imports it anyway).
import transformers  # noqa: F401

from rlhf import faults
from rlhf.errors import UserError
from rlhf.futures import LocalRef
from rlhf.launch import actor_env
from rlhf.launch.ports import free_port
from rlhf.launch.realized import Realized
from rlhf.launch.role_calls import RoleCalls
from rlhf.planning.plan import Plan, RolePlacement
from rlhf.spec.schema import ExperimentSpec

# How long the teardown waits for a role to leave its process group and free its engine, per lane; a lane still
# running a call (a second Ctrl-C stops the run mid-step) is not waited for: its thread ends with the process.
SHUTDOWN_WAIT_S = 30.0


class Lane:
    """One thread running submitted calls in order (a Ray actor's process, here)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[LocalRef, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            ref, fn = item
            self._busy.set()
            try:
                ref.run(fn)
            finally:
                # hold nothing of the call between calls: what it took and made is the caller's to free, on its
                # own thread (a tensor freed here after the interpreter began to exit aborts the process)
                item = ref = fn = None
                self._busy.clear()

    def submit(self, fn: Callable[[], Any], label: str) -> LocalRef:
        ref = LocalRef(label)
        self._queue.put((ref, fn))
        return ref

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def close(self, wait_s: float = 0.0) -> bool:
        """No more calls: the thread ends after the queued ones; waited for up to ``wait_s`` seconds. True when it
        has ended. A lane still running when the interpreter exits would free its objects after Python began to
        finalize, and torch's tensors abort the process then ("terminate called without an active exception")."""
        self._queue.put(None)
        self._thread.join(wait_s)
        return not self._thread.is_alive()


class _Method:
    def __init__(self, actor: LocalActor, name: str) -> None:
        self._actor, self._name = actor, name

    def remote(self, *args: Any, **kwargs: Any) -> LocalRef:
        return self._actor._call(self._name, args, kwargs)


class LocalActor:
    """One role object on a lane, called as a Ray actor is: ``actor.method.remote(*args)`` returns a LocalRef.
    The object is built on its lane when the actor is made (as Ray builds an actor in its process); a failure to
    build it is what every later call raises, as calls on a Ray actor whose constructor failed do.

    ``start`` = (lane, methods): the construction and those start-up calls run on that lane instead, in order with
    its other calls, with the process's random generators left as they were found. A rollout engine starts so on the
    rank's lane: building it draws random numbers (a LoRA adapter's init), which in a process of its own, as on Ray,
    would not move the trainer's generator; here, beside the trainer's own start-up, they would."""

    def __init__(
        self,
        lane: Lane,
        cls: type,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        name: str,
        start: tuple[Lane, tuple[str, ...]] | None = None,
    ) -> None:
        self._lane = lane
        self._name = name
        self._instance: Any = None
        self._start_lane, self._start_methods = start if start is not None else (lane, ())
        build = lambda: self._build(cls, args, kwargs)  # noqa: E731
        self.created = self._start_lane.submit(_rng_kept(build) if start else build, f"{name} start-up")

    def _build(self, cls: type, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        self._instance = cls(*args, **kwargs)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> LocalRef:
        def run() -> Any:
            if self.created.error is not None:
                raise RuntimeError(f"{self._name} failed to start: {self.created.error}") from self.created.error
            return getattr(self._instance, method)(*args, **kwargs)

        if method in self._start_methods:
            return self._start_lane.submit(_rng_kept(run), f"{self._name}.{method}")
        return self._lane.submit(run, f"{self._name}.{method}")

    def __repr__(self) -> str:
        return f"LocalActor({self._name} on {self._lane.name})"


def _rng_kept(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with torch's generators (CPU, and CUDA where there is one) restored afterwards."""

    def run() -> Any:
        import torch

        with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
            return fn()

    return run


class LocalRoleGroup(RoleCalls):
    """One role's one rank in this process (the calls: RoleCalls)."""

    def __init__(self, role: str, actor: LocalActor, spec: ExperimentSpec) -> None:
        self.role = role
        self.actors = [actor]
        self.timeout_s = spec.trainer.remote_timeout_s
        self.startup_timeout_s = spec.trainer.startup_s
        self.heartbeat_s = None  # the driver's own process: nothing to watch from outside
        self.pids = {0: os.getpid()}

    def hint(self, rank: int) -> str:
        return f"in the driver's process (pid {os.getpid()}, launch.executor=local)"

    def respawn(self, rank: int) -> Any:
        raise UserError(
            f"role {self.role}: the local executor restarts nothing (trainer.max_restarts); resume from the last "
            "checkpoint with --resume, or use launch.executor=ray for in-run restarts"
        )

    def kill(self) -> None:
        """Leave the process group (the engines' ``shutdown``), without waiting on a rank still mid-call."""
        _stop(self.actors)
        self.actors = []


def _stop(actors: list[Any]) -> None:
    """``shutdown()`` on each actor whose lane is free, waited for (bounded); a busy lane is left to the exit."""
    from rlhf.waits import Call, wait

    calls = [Call(a.shutdown.remote(), "shutdown", i) for i, a in enumerate(actors) if not a._lane.busy]
    try:
        wait(calls, "shutdown", SHUTDOWN_WAIT_S, grace_s=SHUTDOWN_WAIT_S)
    except Exception:  # noqa: BLE001 - a role that cannot leave cleanly is ended with the process
        pass


@dataclass
class LocalExecutor:
    """This process's side of a realized plan (rlhf.launch.realized.Realized): the rank's lane, an engine's lane,
    and the variables and thread count the job changed here (given back at shutdown)."""

    saved_env: dict[str, str | None] = field(default_factory=dict)
    saved_threads: int = 0
    rank_lane: Lane = field(default_factory=lambda: Lane("rlhf-local-rank"))
    engine_lanes: list[Lane] = field(default_factory=list)
    name: str = "local"

    def worker_env(self) -> dict[str, str]:
        return {}

    def set_env(self, env: dict[str, str]) -> None:
        """``env`` in this process for the job's duration (the previous values come back at shutdown)."""
        for k in env:
            self.saved_env.setdefault(k, os.environ.get(k))
        actor_env.apply(env)  # OMP_NUM_THREADS also sizes torch's pool

    def create_group(
        self,
        realized: Realized,
        role: str,
        placement: RolePlacement,
        actor_cls: type,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        env: dict[str, str],
    ) -> LocalRoleGroup:
        """The role's one rank, built on the rank's lane (fused roles live in it as on Ray)."""
        self.set_env(env)
        return LocalRoleGroup(role, LocalActor(self.rank_lane, actor_cls, args, kwargs, f"role {role}"), realized.spec)

    def start_rollout(self, realized: Realized, model_path: str, env: dict[str, str] | None, start: bool) -> Any:
        """The rollout engine on a lane of its own, as its backend describes it (rlhf.backends.contract.rollout
        RolloutBackend.launch: the actor class and its arguments; its interpreter is this one)."""
        from rlhf.backends.contract.rollout import EnginePlacement
        from rlhf.launch.rollout import RolloutEngineGroup, wait_ready
        from rlhf.spec.registry import rollout_backend

        spec = realized.spec
        backend = rollout_backend(spec.rollout.backend)
        placement = realized.placement("rollout")
        cpus = float(spec.hardware.cpus_per_node) / max(spec.hardware.devices_per_node, 1)
        where = EnginePlacement(0, (0,), cpus * placement.fraction, 0.0, None)
        launch = backend.launch(spec, where, model_path, role_env=env, base_env=faults.env())
        module, name = launch.actor.split(":")
        actor_cls = getattr(importlib.import_module(module), name)
        lane = Lane("rlhf-local-rollout-0")
        self.engine_lanes.append(lane)
        # built on the rank's lane, after the trainer's own start-up and without moving its generators (LocalActor)
        starts_on = (self.rank_lane, ("ready",))
        actor = LocalActor(lane, actor_cls, launch.args, dict(launch.kwargs), "rollout engine 0", start=starts_on)
        started = RolloutEngineGroup(
            spec.rollout.backend,
            [actor],
            [],
            1,
            placements=[where],
            timeout_s=spec.trainer.remote_timeout_s,
            startup_timeout_s=spec.trainer.startup_s,
            heartbeat_s=None,
            needs=[lambda: f"in the driver's process (pid {os.getpid()}, launch.executor=local)"],
            stop=_stop,
        )
        if start:
            started.info = wait_ready(started, [0])
        return started

    def restart_rollout_engine(self, started: Any, engine: int) -> Any:
        raise UserError(
            "the local executor restarts nothing (trainer.max_restarts); resume from the last checkpoint with "
            "--resume, or use launch.executor=ray for in-run restarts"
        )

    def actors_ended(self) -> None:
        """Nothing is held per actor here (the lanes end with the job)."""

    def shutdown(self) -> None:
        """Close the lanes, waiting for each to end (a lane still mid-call, after a second Ctrl-C, is waited for
        :data:`SHUTDOWN_WAIT_S` at most), and give this process its variables and thread count back."""
        for lane in [self.rank_lane, *self.engine_lanes]:
            lane.close(0.0 if lane.busy else SHUTDOWN_WAIT_S)
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.saved_env.clear()
        if self.saved_threads:
            import sys

            torch = sys.modules.get("torch")
            if torch is not None:
                torch.set_num_threads(self.saved_threads)


def realize(spec: ExperimentSpec, plan: Plan) -> Realized:
    """The plan in this process: the rank's variables set (restored at shutdown), no cluster. The run lifecycle
    calls it on a thread of its own while the data builds, so the modules the roles need (torch, transformers, the
    model's code, DeepSpeed) are imported here, as a Ray cluster's idle workers import them (and DeepSpeed through
    rlhf.backends.train.deepspeed.deepspeed_import before any other import of it can reach the original)."""
    import sys

    from rlhf.backends.weight_sync.group import NODE_IP_ENV
    from rlhf.launch.cluster import start_reaper
    from rlhf.launch.realize import preload_modules
    from rlhf.launch.worker_preload import import_modules

    start_reaper()  # a SIGKILLed driver's runs are still ended FAILED in its trackers, as on Ray
    # MLflow before DeepSpeed when it is a tracker: DeepSpeed is imported with MLflow hidden (its autotuner's import
    # of it costs seconds), which a tracker thread opening MLflow at the same moment would take for "not installed"
    first = ("mlflow",) if "mlflow" in spec.logging.active_trackers else ()
    import_modules((*first, *preload_modules(spec, own_process=True)))

    executor = LocalExecutor()
    torch = sys.modules.get("torch")
    executor.saved_threads = torch.get_num_threads() if torch is not None else 0
    executor.set_env(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            NODE_IP_ENV: "127.0.0.1",
            **dict(spec.ray.runtime_env),
        }
    )
    return Realized(spec, plan, executor)
