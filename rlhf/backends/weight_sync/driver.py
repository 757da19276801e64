"""Weight sync as the driver sees it: choose each engine's route once, connect the group, then per sync say "push
version v" to the policy ranks and "pull version v" to the engines, and read back small reports. Weights never pass
through here (except on the ``object_store`` reference route), only names, sizes and checksum digests.

Routes (``rollout.weight_sync``):
    broadcast       a process group of the policy's rank 0 and every engine worker: nccl on GPUs, gloo on CPU
    shared_memory   engines beside the sender read its bucket buffer (CPU: a /dev/shm segment; GPU: CUDA IPC)
    auto            shared_memory for engines on the sender's node (CPU) or device (GPU), broadcast for the rest
    object_store    the reference route: rank 0 packs its gathered weights in the same wire format (one object:
                    header and payload, rlhf.backends.weight_sync.wire.PackedWeights) into Ray's object store, and
                    every engine reads it from there
With LoRA and ``rollout.weight_sync_lora=adapter`` a sync carries the adapter tensors alone (peft's names), in the same
format on every route. After every sync each receiver has checked every tensor's checksum and the driver compares
every receiver's digest with the sender's; every ``rollout.verify_sync_every`` syncs a log-prob probe compares each
engine with the trainer on a fixed batch. Every wait is bounded by ``rollout.weight_sync_timeout_s`` (rlhf.waits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.errors import WorkerFailure
from rlhf.spec.executor import heartbeat_s
from rlhf.spec.schema import ExperimentSpec
from rlhf.waits import Call, wait

ROUTES = ("auto", "broadcast", "shared_memory", "object_store")
_GRACE_S = 3.0  # after a first failure, how long the other members get to fail too (to name the real culprit)


class WeightSyncError(WorkerFailure):
    """A sync (or its set-up or probe) failed; ``engine`` is the rollout engine at fault when one is known, so the
    run lifecycle can restart it (a policy rank at fault is named with its role: only every actor from the last
    checkpoint helps then). A checksum mismatch or a failed probe is not restartable: the run stops."""

    restartable_kinds = ("died", "hung", "stalled", "timeout", "failed")

    def __init__(self, message: str, *, role: str = "rollout", rank: int | None = None, kind: str = "failed") -> None:
        super().__init__(message, role=role, rank=rank, kind=kind)
        self.engine = rank if role == "rollout" else None  # died | hung | stalled | checksum | probe | failed


def _same_device(a: dict[str, Any], b: dict[str, Any], accelerator: str) -> bool:
    """Whether two members share a node (CPU) or a GPU (GPU: same UUID; the rehearsal's simulated GPUs: same node
    id and physical index)."""
    if accelerator == "cpu":
        if a.get("node_id") and b.get("node_id"):
            return a["node_id"] == b["node_id"]
        return a.get("node_ip") == b.get("node_ip")
    if a.get("gpu_uuid") is not None:
        return a.get("gpu_uuid") == b.get("gpu_uuid")
    return a.get("device") is not None and (a.get("node_id"), a.get("device")) == (b.get("node_id"), b.get("device"))


def choose_routes(
    requested: str,
    sender: dict[str, Any],
    engines: Sequence[Sequence[dict[str, Any]]],
    accelerator: str,
    backend: str = "",
) -> list[list[str]]:
    """The route of every worker of every engine (``engines[i][k]``: where worker k of engine i runs), chosen from
    the worker's own device, since with TP > 1 the engine actor holds no GPU: shared memory needs the sender's node
    (CPU) or the sender's GPU (GPU), the rest is broadcast. With nccl (GPUs) no communicator may hold two members on
    one GPU (NCCL refuses it), which a requested broadcast to a worker on the sender's GPU would make."""
    from rlhf.errors import UserError

    nccl = (backend or ("nccl" if accelerator == "gpu" else "gloo")) == "nccl"
    routes: list[list[str]] = []
    members = [("policy rank 0", sender)]
    for i, workers in enumerate(engines):
        out = []
        for k, loc in enumerate(workers):
            local = _same_device(loc, sender, accelerator)
            if requested == "auto":
                route = "shared_memory" if local else "broadcast"
            elif requested == "shared_memory" and not local:
                where = "node" if accelerator == "cpu" else "GPU"
                raise UserError(
                    f"rollout.weight_sync=shared_memory: rollout engine {i} worker {k} is not on the policy rank 0's "
                    f"{where} (worker at {loc.get('node_ip')} {loc.get('gpu_uuid') or loc.get('device') or ''}, "
                    f"policy at {sender.get('node_ip')}); use rollout.weight_sync=auto (shared memory where possible, "
                    "broadcast elsewhere) or broadcast"
                )
            else:
                route = requested
            out.append(route)
            if route == "broadcast":
                members.append((f"rollout engine {i} worker {k}", loc))
        routes.append(out)
    if nccl and accelerator == "gpu":
        check_one_member_per_device(members)
    return routes


def check_one_member_per_device(members: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """An NCCL communicator (the broadcast route's data group) with two members on one GPU is refused by NCCL;
    name both and the fix."""
    from rlhf.errors import UserError

    seen: dict[Any, str] = {}
    for label, loc in members:
        key = loc.get("gpu_uuid") or (loc.get("node_id"), loc.get("device"))
        if key in seen:
            raise UserError(
                f"weight sync: {label} and {seen[key]} would join one NCCL communicator on the same GPU ({key}), "
                "which NCCL refuses; use rollout.weight_sync=auto (CUDA IPC to workers on the sender's GPU) or "
                "rollout.weight_sync_backend=gloo"
            )
        seen[key] = label


def sync_ranks(routes: Sequence[Sequence[str]]) -> tuple[list[int], list[int], int]:
    """The group's layout: each engine's first rank, the ranks in the data (broadcast) group, the world size.
    Rank 0 is the sender; worker k of engine i is ``first[i] + k``."""
    first, data, rank = [], [0], 1
    for workers in routes:
        first.append(rank)
        data += [rank + k for k, r in enumerate(workers) if r == "broadcast"]
        rank += len(workers)
    return first, data, rank


@dataclass
class SyncResult:
    version: int
    seconds: float
    bytes: int = 0
    routes: list[str] = field(default_factory=list)
    sender: dict[str, Any] | None = None
    receivers: list[list[dict[str, Any]]] = field(default_factory=list)  # per engine, per worker
    gathers: list[dict[str, Any]] = field(default_factory=list)  # the other policy ranks (ZeRO-3)


def wait_named(calls: Sequence[Call], timeout_s: float, what: str, heartbeat_s: float | None = None) -> list[Any]:
    """The members' answers with a deadline; the first failure (a dead engine before a member that failed because of
    it: the others get a grace period to fail too) raises WeightSyncError naming the member; a member that stops
    answering its heartbeat for ``heartbeat_s`` (trainer.heartbeat_timeout_s) raises it at once, kind stalled."""
    return wait(
        calls,
        what,
        timeout_s,
        timeout_key="rollout.weight_sync_timeout_s",
        error=WeightSyncError,
        grace_s=_GRACE_S,
        blame_first="rollout",
        heartbeat_s=heartbeat_s,
    )


class WeightSync:
    """Connects the group at start-up (and again after an engine restart) and runs each sync."""

    def __init__(self, spec: ExperimentSpec, policy: Any, engines: Any, *, measure_memory: bool = False) -> None:
        self.spec = spec
        self.policy = policy  # RoleGroup of the policy ranks
        self.engines = engines  # rlhf.pipelines.rollout_engines.RolloutEngines
        ro = spec.rollout
        self.requested = ro.weight_sync
        # rollout.weight_sync_lora=adapter: the LoRA adapters alone travel (validation made sure the engines load them)
        self.adapter = spec.model.lora.rank > 0 and ro.weight_sync_lora == "adapter"
        self.timeout_s = ro.weight_sync_timeout_s
        self.heartbeat_s = heartbeat_s(spec)
        self.measure_memory = measure_memory
        self.version = 0
        self.syncs = 0
        self.probe_batch: list[tuple[list[int], list[int]]] | None = None  # fixed at the first probe
        self.probe_last: tuple[list[float], list[list[float]]] | None = None  # (trainer, per engine) log-probs
        self.routes: list[list[str]] = []  # per engine, per worker
        self.locations: list[list[dict[str, Any]]] = []
        if self.requested != "object_store":
            self.connect()
        else:
            self.routes = [["object_store"]] * len(engines.actors)

    # -- set-up ---------------------------------------------------------------------------------------------------
    def _engine_calls(self, method: str, args: Callable[[int], tuple[Any, ...]] = lambda i: ()) -> list[Call]:
        """``method(*args(i))`` on every engine i, as calls the waits name by engine."""
        return [
            Call(getattr(a, method).remote(*args(i)), "rollout", i, self.engines.label(i), actor=a)
            for i, a in enumerate(self.engines.actors)
        ]

    def connect(self) -> None:
        """Choose routes and form the group: the policy's rank 0 plus every worker of every engine."""
        from rlhf.backends.weight_sync.group import GroupConfig

        ro, hw = self.spec.rollout, self.spec.hardware
        sender = self.policy.actors[0]
        locs = wait_named(
            [Call(sender.sync_location.remote(), "policy", 0, actor=sender)] + self._engine_calls("sync_location"),
            self.timeout_s,
            "weight-sync set-up",
            self.heartbeat_s,
        )
        self.locations = locs[1:]  # per engine, per worker
        self.routes = choose_routes(self.requested, locs[0], self.locations, hw.accelerator, ro.weight_sync_backend)
        ranks, data_ranks, world = sync_ranks(self.routes)
        backend = ro.weight_sync_backend or ("nccl" if hw.accelerator == "gpu" else "gloo")
        host = locs[0]["node_ip"]
        (port,) = wait_named(
            [Call(sender.sync_reserve.remote(host), "policy", 0, actor=sender)],
            self.timeout_s,
            "weight-sync set-up",
            self.heartbeat_s,
        )
        base_cfg = GroupConfig(host, port, world, 0, backend, tuple(data_ranks), self.timeout_s)
        shared = None
        if any("shared_memory" in r for r in self.routes):
            shared = "cuda" if hw.accelerator == "gpu" else "host"
        options = {
            "bucket_mb": ro.weight_sync_bucket_mb,
            "checksums": ro.weight_sync_checksums,
            "adapter": self.adapter,
        }
        calls = [
            Call(sender.sync_connect.remote(base_cfg.to_dict(), **options, shared=shared), "policy", 0, actor=sender)
        ]
        calls += [
            Call(actor.sync_connect.remote(None, **options, shared=None), "policy", r, actor=actor)
            for r, actor in enumerate(self.policy.actors[1:], start=1)
        ]
        calls += self._engine_calls(
            "sync_connect",
            lambda i: (
                GroupConfig(host, port, world, ranks[i], backend, tuple(data_ranks), self.timeout_s).to_dict(),
                self.routes[i],
            ),
        )
        wait_named(calls, self.timeout_s, "weight-sync set-up", self.heartbeat_s)

    # -- one sync -------------------------------------------------------------------------------------------------
    def sync(self) -> SyncResult:
        """Every engine gets the policy's current weights; raises WeightSyncError naming the engine at fault."""
        t0 = time.perf_counter()
        self.version += 1
        self.syncs += 1
        v = self.version
        if self.requested == "object_store":
            sender, gathers, receivers = self._through_object_store(v)
        else:
            pushes = self.policy.async_run_all("sync_push", v, self.measure_memory)
            calls = [Call(ref, "policy", r, actor=self.policy.actors[r]) for r, ref in enumerate(pushes)]
            calls += self._engine_calls("sync_pull", lambda i: (v, self.measure_memory))
            out = wait_named(calls, self.timeout_s, f"weight sync v{v}", self.heartbeat_s)
            n_policy = len(self.policy.actors)
            sender, gathers, receivers = out[0], [g for g in out[1:n_policy] if g], out[n_policy:]
        for i, reports in enumerate(receivers):
            for w, rep in enumerate(reports):
                if rep["digest"] != sender["digest"]:
                    first = rep.get("first_mismatch") or "unknown"
                    raise WeightSyncError(
                        f"{self.engines.label(i)} worker {w}: weight sync v{v} digest {rep['digest']} differs from the "
                        f"sender's {sender['digest']} (first differing tensor: {first})",
                        rank=i,
                        kind="checksum",
                    )
        return SyncResult(v, time.perf_counter() - t0, sender["bytes"], list(self.routes), sender, receivers, gathers)

    def _through_object_store(self, v: int) -> tuple[dict[str, Any], list[Any], list[list[dict[str, Any]]]]:
        """The reference route: every policy rank takes part in the gathers and rank 0 puts one packed sync in the
        object store (its ObjectRef comes back inside its report, so the driver never holds the weights); every
        engine reads it from there zero-copy and checks it."""
        checksums = self.spec.rollout.weight_sync_checksums
        packs = wait_named(
            [
                Call(ref, "policy", r, actor=self.policy.actors[r])
                for r, ref in enumerate(self.policy.async_run_all("pack_weights", v, checksums, self.adapter))
            ],
            self.timeout_s,
            f"weight sync v{v} (packing)",
            self.heartbeat_s,
        )
        sender, ref = packs[0]["report"], packs[0]["weights"][0]
        loads = self._engine_calls("load_weights", lambda i: (ref,))
        receivers = wait_named(loads, self.timeout_s, f"weight sync v{v}", self.heartbeat_s)
        return sender, [p for p in packs[1:] if p], receivers

    def close(self) -> None:
        if self.requested == "object_store":
            return
        calls = [Call(a.sync_close.remote(), "policy", 0) for a in self.policy.actors[:1]]
        calls += [Call(a.sync_close.remote(), "rollout", i) for i, a in enumerate(self.engines.actors)]
        try:
            wait(calls, "closing the weight sync", 30.0, grace_s=30.0)
        except Exception:  # noqa: BLE001 - closing after a failure: the members may be gone
            pass

    # -- the log-prob probe ---------------------------------------------------------------------------------------
    def probe_due(self) -> bool:
        every = self.spec.rollout.verify_sync_every
        return every > 0 and (self.syncs == 1 or self.syncs % every == 0)

    def probe_engines(self, prompts: list[list[int]], eos_id: int | None) -> list[list[list[float]]]:
        """The engine side of the probe (call it while the engines are awake): the first time, engine 0 samples a
        fixed batch on ``prompts`` (plain temperature-1 sampling, a fixed seed), which every later probe reuses;
        then every engine scores that batch teacher-forced (temperature 1, deterministic). Returns, per engine,
        per sequence, the output tokens' log-probs."""
        if self.probe_batch is None:
            ro = self.spec.rollout
            sampling = SamplingSpec(
                max_new_tokens=min(ro.max_new_tokens, 16),
                temperature=1.0,
                top_p=1.0,
                top_k=-1,
                n=1,
                stop_token_ids=(eos_id,) if eos_id is not None else (),
                seed=12345,
            )
            engine = self.engines.actors[0]
            (rollouts,) = wait_named(
                [Call(engine.generate.remote(prompts, sampling), "rollout", 0, self.engines.label(0), actor=engine)],
                self.timeout_s,
                "the weight-sync probe",
                self.heartbeat_s,
            )
            self.probe_batch = [(list(r.prompt_ids), list(r.output_ids)) for r in rollouts if r.output_ids]
        return wait_named(
            self._engine_calls("score", lambda i: (self.probe_batch,)),
            self.timeout_s,
            "the weight-sync probe",
            self.heartbeat_s,
        )

    def judge_probe(
        self, per_engine: list[list[list[float]]], score: Callable[[list[Rollout]], list[list[float]]]
    ) -> dict[str, float]:
        """Compare every engine's log-probs on the probe batch with the trainer's (``score``: the policy's
        log-probs of the same tokens at temperature 1). Raises WeightSyncError naming an engine that is not running
        the trained weights: its mean difference from the trainer is above ``rollout.verify_sync_tolerance``, or
        the trainer's log-probs moved since the last probe and the engine's did not move with them (a stale engine:
        the tolerance alone cannot see a step smaller than itself). See :func:`probe_verdict`."""
        rollouts = [
            Rollout(
                prompt_ids=p, output_ids=o, action_mask=[1] * len(o), logprobs=[0.0] * len(o), finish_reason="length"
            )
            for p, o in self.probe_batch
        ]
        trainer = [float(x) for seq in score(rollouts) for x in seq]
        previous = self.probe_last
        worst_max, diffs, moved = 0.0, [], []
        verdicts = []
        for i, seqs in enumerate(per_engine):
            engine = [float(x) for seq in seqs for x in seq]
            before = previous[1][i] if previous is not None and i < len(previous[1]) else None
            tol = self.spec.rollout.verify_sync_tolerance
            v = probe_verdict(engine, trainer, before, previous[0] if previous else None, tol)
            verdicts.append(v)
            worst_max = max(worst_max, v["diff_max"])
            diffs.append(v["diff_mean"])
            moved.append(v["engine_moved"])
            if v["stale"] or v["diff_mean"] > self.spec.rollout.verify_sync_tolerance:
                why = (
                    f"its log-probs differ from the trainer's by {v['diff_mean']:.3g} on average "
                    f"(rollout.verify_sync_tolerance={self.spec.rollout.verify_sync_tolerance:g})"
                    if not v["stale"]
                    else f"the trainer's log-probs moved by {v['trainer_moved']:.3g} since the last probe and the "
                    f"engine's by only {v['engine_moved']:.3g}"
                )
                raise WeightSyncError(
                    f"{self.engines.label(i)}: after weight sync v{self.version} {why}: the engine is not running the "
                    "trained weights",
                    rank=i,
                    kind="probe",
                )
        self.probe_last = (trainer, [[float(x) for seq in seqs for x in seq] for seqs in per_engine])
        out = {"rollout/sync_logprob_diff_max": worst_max, "rollout/sync_logprob_diff_mean": max(diffs, default=0.0)}
        if previous is not None:
            out["rollout/sync_logprob_moved"] = min(moved, default=0.0)
            out["rollout/sync_trainer_moved"] = verdicts[0]["trainer_moved"] if verdicts else 0.0
        return out


def probe_verdict(
    engine: list[float],
    trainer: list[float],
    engine_before: list[float] | None,
    trainer_before: list[float] | None,
    tolerance: float,
) -> dict[str, Any]:
    """One engine's probe on a fixed batch scored teacher-forced (deterministic, so an engine whose weights did not
    change gives exactly the numbers it gave before):

        diff           mean |engine - trainer| now (numerics only, for an engine holding the trainer's weights)
        trainer_moved  mean |trainer - trainer at the last probe|: how far training moved the weights
        engine_moved   mean |engine - engine at the last probe|
    Stale: the trainer moved by clearly more than the engine-trainer difference of the last probe (the numeric
    noise), and the engine moved by less than half of that. A stale engine has engine_moved 0, however small the
    step; an engine with the new weights moves with the trainer."""
    n = max(len(engine), 1)
    diffs = [abs(a - b) for a, b in zip(engine, trainer, strict=True)]
    out: dict[str, Any] = {
        "diff_mean": sum(diffs) / n,
        "diff_max": max(diffs, default=0.0),
        "trainer_moved": 0.0,
        "engine_moved": 0.0,
        "stale": False,
    }
    if engine_before is None or trainer_before is None:
        return out
    noise = sum(abs(a - b) for a, b in zip(engine_before, trainer_before, strict=True)) / n
    out["trainer_moved"] = sum(abs(a - b) for a, b in zip(trainer, trainer_before, strict=True)) / n
    out["engine_moved"] = sum(abs(a - b) for a, b in zip(engine, engine_before, strict=True)) / n
    conclusive = out["trainer_moved"] > 2 * noise + 1e-7
    out["stale"] = conclusive and out["engine_moved"] < out["trainer_moved"] / 2
    return out
