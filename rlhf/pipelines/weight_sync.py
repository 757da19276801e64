"""Weight sync as the driver sees it: choose each engine's route once, connect the group, then per sync say "push
version v" to the policy ranks and "pull version v" to the engines, and read back small reports. Weights never pass
through here (except on the ``object_store`` reference route), only names, sizes and checksum digests.

Routes (``rollout.weight_sync``):
    broadcast       a process group of the policy's rank 0 and every engine worker: nccl on GPUs, gloo on CPU
    shared_memory   engines beside the sender read its bucket buffer (CPU: a /dev/shm segment; GPU: CUDA IPC)
    auto            shared_memory for engines on the sender's node (CPU) or device (GPU), broadcast for the rest
    object_store    the reference route: rank 0's gathered weights through Ray's object store
After every sync each receiver has checked every tensor's checksum; every ``rollout.verify_sync_every`` syncs a
log-prob probe compares each engine with the trainer on a fixed batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.errors import WorkerFailure
from rlhf.spec.schema import ExperimentSpec

ROUTES = ("auto", "broadcast", "shared_memory", "object_store")
_GRACE_S = 3.0  # after a first failure, how long the other members get to fail too (to name the real culprit)


class WeightSyncError(WorkerFailure):
    """A sync (or its set-up or probe) failed; ``engine`` is the rollout engine at fault when one is known, so the
    run lifecycle can restart it. A checksum mismatch or a failed probe is not restartable: the run stops."""

    restartable_kinds = ("died", "hung", "timeout", "failed")

    def __init__(self, message: str, *, engine: int | None = None, kind: str = "failed") -> None:
        super().__init__(message, role="rollout", rank=engine, kind=kind)
        self.engine = engine  # died | timeout | checksum | probe | failed


def choose_routes(
    requested: str, sender: dict[str, Any], engines: Sequence[dict[str, Any]], accelerator: str
) -> list[str]:
    """The route of each engine: shared memory needs the sender's node (CPU) or the sender's device (GPU)."""
    routes = []
    for i, loc in enumerate(engines):
        local = loc.get("node_ip") == sender.get("node_ip") and (
            accelerator == "cpu" or (loc.get("gpu_uuid") is not None and loc.get("gpu_uuid") == sender.get("gpu_uuid"))
        )
        if requested == "auto":
            routes.append("shared_memory" if local else "broadcast")
        elif requested == "shared_memory" and not local:
            where = "node" if accelerator == "cpu" else "GPU"
            from rlhf.errors import UserError

            raise UserError(
                f"rollout.weight_sync=shared_memory: rollout engine {i} is not on the policy rank 0's {where} "
                f"(engine at {loc.get('node_ip')}, policy at {sender.get('node_ip')}); use rollout.weight_sync=auto "
                "(shared memory where possible, broadcast elsewhere) or broadcast"
            )
        else:
            routes.append(requested)
    return routes


@dataclass
class SyncResult:
    version: int
    seconds: float
    bytes: int = 0
    routes: list[str] = field(default_factory=list)
    sender: dict[str, Any] | None = None
    receivers: list[list[dict[str, Any]]] = field(default_factory=list)  # per engine, per worker
    gathers: list[dict[str, Any]] = field(default_factory=list)  # the other policy ranks (ZeRO-3)


def wait_named(named: Sequence[tuple[str, int | None, Any]], timeout_s: float, what: str) -> list[Any]:
    """``ray.get`` of ``(label, engine, ref)`` triples with a deadline; the first failure (preferring a dead
    engine over a member that failed because of it) raises WeightSyncError naming the member."""
    import ray

    pending = {ref: i for i, (_, _, ref) in enumerate(named)}
    results: dict[int, Any] = {}
    failures: list[tuple[int, BaseException]] = []
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if failures:
            left = min(left, _GRACE_S)
        if left <= 0:
            break
        done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        if not done:
            continue
        i = pending.pop(done[0])
        try:
            results[i] = ray.get(done[0])
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            failures.append((i, e))
    if failures:
        dead = [f for f in failures if isinstance(f[1], ray.exceptions.RayActorError)]
        engine_first = sorted(dead or failures, key=lambda f: named[f[0]][1] is None)
        i, e = engine_first[0]
        label, engine, _ = named[i]
        kind = "died" if isinstance(e, ray.exceptions.RayActorError) else "failed"
        cause = _cause(e)
        if "ChecksumMismatch" in cause:
            kind = "checksum"
        raise WeightSyncError(
            f"{label} {'died' if kind == 'died' else 'failed'} during {what}: {cause}", engine=engine, kind=kind
        )
    if pending:
        late = [named[i] for i in sorted(pending.values())]
        engine = next((e for _, e, _ in late if e is not None), None)
        names = ", ".join(label for label, _, _ in late)
        raise WeightSyncError(
            f"{names} did not answer within {timeout_s:.0f} s during {what}", engine=engine, kind="timeout"
        )
    return [results[i] for i in range(len(named))]


def _cause(e: BaseException) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # A Ray task error carries the remote traceback; its last line is the remote exception.
    return lines[-1] if lines else type(e).__name__


class WeightSync:
    """Connects the group at start-up (and again after an engine restart) and runs each sync."""

    def __init__(self, spec: ExperimentSpec, policy: Any, engines: Any, *, measure_memory: bool = False) -> None:
        self.spec = spec
        self.policy = policy  # RoleGroup of the policy ranks
        self.engines = engines  # rlhf.pipelines.rollout_engines.RolloutEngines
        ro = spec.rollout
        self.requested = ro.weight_sync
        self.timeout_s = ro.weight_sync_timeout_s
        self.measure_memory = measure_memory
        self.version = 0
        self.syncs = 0
        self.routes: list[str] = []
        if self.requested != "object_store":
            self.connect()
        else:
            self.routes = ["object_store"] * len(engines.actors)

    # -- set-up ---------------------------------------------------------------------------------------------------
    def _labels(self) -> list[str]:
        return [
            f"rollout engine {i} ({self.engines.backend}, pid {info.get('pid', '?')})"
            for i, info in enumerate(self.engines.info)
        ]

    def connect(self) -> None:
        """Choose routes and form the group: the policy's rank 0 plus every worker of every engine."""
        import ray

        from rlhf.engines.weight_sync import GroupConfig

        ro, hw = self.spec.rollout, self.spec.hardware
        sender = self.policy.actors[0]
        labels = self._labels()
        locs = wait_named(
            [("policy rank 0", None, sender.sync_location.remote())]
            + [(labels[i], i, a.sync_location.remote()) for i, a in enumerate(self.engines.actors)],
            self.timeout_s,
            "weight-sync set-up",
        )
        self.routes = choose_routes(self.requested, locs[0], locs[1:], hw.accelerator)
        per_engine = self.engines.started.workers_per_engine
        ranks, data_ranks = [], [0]
        for i, route in enumerate(self.routes):
            base = 1 + i * per_engine
            ranks.append(base)
            if route == "broadcast":
                data_ranks += list(range(base, base + per_engine))
        world = 1 + per_engine * len(self.routes)
        backend = ro.weight_sync_backend or ("nccl" if hw.accelerator == "gpu" else "gloo")
        host = locs[0]["node_ip"]
        port = ray.get(sender.sync_reserve.remote(host), timeout=self.timeout_s)
        base_cfg = GroupConfig(host, port, world, 0, backend, tuple(data_ranks), self.timeout_s)
        shared = None
        if "shared_memory" in self.routes:
            shared = "cuda" if hw.accelerator == "gpu" else "host"
        refs = [
            (
                "policy rank 0",
                None,
                sender.sync_connect.remote(
                    base_cfg.to_dict(),
                    bucket_mb=ro.weight_sync_bucket_mb,
                    checksums=ro.weight_sync_checksums,
                    shared=shared,
                ),
            )
        ]
        for r, actor in enumerate(self.policy.actors[1:], start=1):
            refs.append(
                (
                    f"policy rank {r}",
                    None,
                    actor.sync_connect.remote(
                        None, bucket_mb=ro.weight_sync_bucket_mb, checksums=ro.weight_sync_checksums, shared=None
                    ),
                )
            )
        for i, actor in enumerate(self.engines.actors):
            cfg = GroupConfig(host, port, world, ranks[i], backend, tuple(data_ranks), self.timeout_s)
            refs.append((labels[i], i, actor.sync_connect.remote(cfg.to_dict(), self.routes[i])))
        wait_named(refs, self.timeout_s, "weight-sync set-up")

    # -- one sync -------------------------------------------------------------------------------------------------
    def sync(self) -> SyncResult:
        """Every engine gets the policy's current weights; raises WeightSyncError naming the engine at fault."""
        t0 = time.perf_counter()
        self.version += 1
        self.syncs += 1
        v = self.version
        if self.requested == "object_store":
            refs = self.policy.async_run_all("named_weights")
            self.engines.load_weights(refs[0])
            self.policy.get(refs, "named_weights")
            return SyncResult(v, time.perf_counter() - t0, routes=list(self.routes))
        labels = self._labels()
        named = [
            (f"policy rank {r}", None, ref)
            for r, ref in enumerate(self.policy.async_run_all("sync_push", v, self.measure_memory))
        ]
        named += [(labels[i], i, a.sync_pull.remote(v, self.measure_memory)) for i, a in enumerate(self.engines.actors)]
        out = wait_named(named, self.timeout_s, f"weight sync v{v}")
        n_policy = len(self.policy.actors)
        sender, gathers, receivers = out[0], [g for g in out[1:n_policy] if g], out[n_policy:]
        for i, reports in enumerate(receivers):
            for w, rep in enumerate(reports):
                if rep["digest"] != sender["digest"]:
                    raise WeightSyncError(
                        f"{labels[i]} worker {w}: weight sync v{v} digest {rep['digest']} differs from the sender's "
                        f"{sender['digest']} (first differing tensor: {rep.get('first_mismatch') or 'unknown'})",
                        engine=i,
                        kind="checksum",
                    )
        return SyncResult(v, time.perf_counter() - t0, sender["bytes"], list(self.routes), sender, receivers, gathers)

    def close(self) -> None:
        import ray

        if self.requested == "object_store":
            return
        refs = [a.sync_close.remote() for a in self.policy.actors[:1]] + [
            a.sync_close.remote() for a in self.engines.actors
        ]
        try:
            ray.get(refs, timeout=30)
        except Exception:  # noqa: BLE001 - closing after a failure: the members may be gone
            pass

    # -- the log-prob probe ---------------------------------------------------------------------------------------
    def probe_due(self) -> bool:
        every = self.spec.rollout.verify_sync_every
        return every > 0 and (self.syncs == 1 or self.syncs % every == 0)

    def probe(
        self, prompts: list[list[int]], score: Callable[[list[Rollout]], list[list[float]]], eos_id: int | None
    ) -> dict[str, float]:
        """A fixed small batch generated by every engine right after a sync, its log-probs recomputed by the
        trainer (``score``); returns the max and mean absolute difference and raises WeightSyncError naming an
        engine whose mean exceeds ``rollout.verify_sync_tolerance``. Sampling is plain temperature sampling (no
        top-k/top-p), so the engine's and the trainer's log-probs mean the same distribution."""

        ro = self.spec.rollout
        sampling = SamplingSpec(
            max_new_tokens=min(ro.max_new_tokens, 16),
            temperature=ro.temperature or 1.0,
            top_p=1.0,
            top_k=-1,
            n=1,
            stop_token_ids=(eos_id,) if eos_id is not None else (),
            seed=12345,
        )
        labels = self._labels()
        per_engine = wait_named(
            [(labels[i], i, a.generate.remote(prompts, sampling)) for i, a in enumerate(self.engines.actors)],
            self.timeout_s,
            "the weight-sync probe",
        )
        worst_max, means = 0.0, []
        for i, rollouts in enumerate(per_engine):
            trainer = score(rollouts)
            diffs = [
                abs(a - b) for r, t in zip(rollouts, trainer, strict=True) for a, b in zip(r.logprobs, t, strict=True)
            ]
            mean = sum(diffs) / max(len(diffs), 1)
            worst_max = max(worst_max, max(diffs, default=0.0))
            means.append(mean)
            if mean > ro.verify_sync_tolerance:
                raise WeightSyncError(
                    f"{labels[i]}: after weight sync v{self.version} its log-probs differ from the trainer's by "
                    f"{mean:.3g} on average (rollout.verify_sync_tolerance={ro.verify_sync_tolerance:g}): the engine "
                    "is not running the trained weights",
                    engine=i,
                    kind="probe",
                )
        return {"rollout/sync_logprob_diff_max": worst_max, "rollout/sync_logprob_diff_mean": max(means, default=0.0)}
