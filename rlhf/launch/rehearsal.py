"""``rlhf-plan --rehearse``: a run's start-up on a private loopback Ray cluster that declares the recipe's hardware,
stopped where each process would first touch a device or load weights, and checked.

What runs is the run's own launch code: the cluster declares ``hardware.nodes`` nodes (Ray's cluster utilities
simulate several on this host) of ``hardware.devices_per_node`` GPUs; rlhf.launch.realize creates the placement
groups; rlhf.pipelines.role_set.start_role_actors starts every training-side role's real worker class in its bundles;
rlhf.launch.rollout starts every engine's real actor class with its real runtime environment (the vLLM interpreter,
the variables it sets for vLLM's Ray executor); rlhf.backends.weight_sync.driver.choose_routes and sync_ranks form the
weight-sync group; rlhf.pipelines.rl_roles.HybridSchedule drives the engines' sleep and wake. Each trainer is then
asked where it would compute (rlhf.backends.shared.worker_base.BaseWorker.placement) instead of loading its model; each
engine
runs its version check and, for tensor parallelism, places one stand-in per worker in the bundle with the GPU share
vLLM's Ray executor would use (rlhf.backends.rollout.vllm.placement, vLLM's rule) instead of building vLLM.

Stood in for: vLLM's executor (its workers are stand-ins placed by vLLM's rule), and every device itself (no
kernel, no NCCL or CUDA IPC, no memory measured: the memory phases are what the schedule asks of the engines and
trainers, compared with the plan's). scripts/gpu_check.sh covers those on a real GPU.

Checks (each violation names role, process and device): no device given more than the plan's shares; every
process computes on the GPU Ray reserved for it; every TP worker has a device of its own and engines share none;
no communicator (a role's training group, the weight sync's NCCL group) has two members on one device; colocated
roles share exactly the devices the plan gives their group, and groups share none; the memory phases the schedule
goes through equal the plan's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from rlhf.errors import UserError
from rlhf.planning.plan import Plan
from rlhf.spec.schema import ExperimentSpec

STOOD_IN = (
    "stood in for: vLLM's Ray executor (each TP worker is a stand-in placed by vLLM's rule, "
    "rlhf/backends/rollout/vllm/placement.py) and the devices themselves (no model loaded, no kernel, NCCL or "
    "CUDA IPC run); "
    "everything else is the code a run executes"
)


class RehearsalFailed(UserError):
    """The rehearsal found violations; the message lists each with role, process and device."""


@dataclass(frozen=True)
class Proc:
    """One process of the device map."""

    role: str
    label: str  # e.g. "policy rank 3", "rollout engine 1", "rollout engine 1 worker 0"
    node: int  # node index (0 = the first node holding GPUs)
    bundle: int | None
    gpus: float  # its Ray GPU share
    cuda_visible: str  # as the process sees it ("(unset)", or "(all: NOSET)" for colocated ranks)
    local_rank: int | None
    rank: str  # "r/world" in its training group, or "-"
    device: int | None  # physical GPU on its node
    pid: int | None = None
    ray_gpus: tuple[int, ...] = ()
    note: str = ""  # printed under the row (an engine's vLLM variables)
    rank_env: str = ""  # a trainer rank's variables: set in its "process", or through its actor's "runtime_env"


@dataclass
class Rehearsal:
    spec_name: str
    procs: list[Proc] = field(default_factory=list)
    sync: list[tuple[str, int, str, str]] = field(default_factory=list)  # (member, rank, route, device)
    sync_backend: str = ""
    phases: list[tuple[str, str]] = field(default_factory=list)  # (phase, what the schedule left on device)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # seconds per part of the rehearsal

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [f"rehearsal of {self.spec_name}: {len(self.procs)} process(es) placed, nothing loaded", ""]
        head = f"  {'role':<9} {'process':<35} {'node':>4} {'bundle':>6} {'GPU':>5}  {'CUDA_VISIBLE_DEVICES':<20}"
        lines += ["device map", head + f" {'LOCAL_RANK':>10} {'rank/world':>10}  device"]
        for p in self.procs:
            cvd = p.cuda_visible
            lr = "-" if p.local_rank is None else str(p.local_rank)
            dev = "-" if p.device is None else f"node{p.node}:gpu{p.device}"
            bundle = "-" if p.bundle is None else str(p.bundle)
            lines.append(
                f"  {p.role:<9} {p.label:<35} {p.node:>4} {bundle:>6} {p.gpus:>5.2f}  {cvd:<20} {lr:>10} "
                f"{p.rank:>10}  {dev}"
            )
            if p.note:
                lines.append(f"  {'':<9}   {p.note}")
        ways = {p.rank_env for p in self.procs if p.rank_env}
        if ways:
            how = {
                "process": "set in each process by the actor (a private cluster, as rlhf-run starts one node)",
                "runtime_env": "through each actor's runtime_env (a cluster joined by ray.address)",
            }
            lines.append("rank variables: " + "; ".join(how[w] for w in sorted(ways)))
        if self.sync:
            lines += ["", f"weight sync group (data backend {self.sync_backend})"]
            for member, rank, route, device in self.sync:
                lines.append(f"  rank {rank:>3}  {member:<30} {route:<14} {device}")
        if self.phases:
            lines += ["", "memory phases (what the schedule leaves in device memory; the plan's, checked)"]
            lines += [f"  {phase:<11} {what}" for phase, what in self.phases]
        lines += ["", STOOD_IN, ""]
        if self.violations:
            lines.append(f"rehearsal FAILED: {len(self.violations)} violation(s)")
            lines += [f"  - {v}" for v in self.violations]
        else:
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
            lines.append(f"rehearsal passed: every check holds ({self.seconds:.1f} s: {parts})")
        return "\n".join(lines)


# -- the cluster ------------------------------------------------------------------------------------------------


def cluster_shape(spec: ExperimentSpec) -> tuple[int, int, int]:
    """(nodes, GPUs per node, CPUs per node) the recipe's hardware declares."""
    hw = spec.hardware
    return hw.nodes, hw.devices_per_node, hw.cpus_per_node


@contextmanager
def simulated_cluster(nodes: int, gpus_per_node: int, cpus_per_node: int) -> Iterator[None]:
    """A private Ray cluster on 127.0.0.1 declaring ``nodes`` nodes of ``gpus_per_node`` GPUs (logical resources:
    nothing needs a GPU to hold them). Several nodes are simulated with Ray's own cluster utilities (a raylet each);
    the driver's head node holds no GPU, so every bundle lands on a declared node.

    Each shape takes the path a run on it takes: one node is what ``rlhf-run`` starts as its private cluster (the
    workers begin with the job's variables and each actor sets its rank's in its own process, rlhf.launch.actor_env),
    several nodes are joined as ``ray.address`` joins a real cluster (every variable through the actor's
    ``runtime_env``)."""
    from rlhf.launch.cluster import LOOPBACK_ENV, worker_env, workers_start_with

    os.environ.setdefault(LOOPBACK_ENV, "0")
    import ray

    if ray.is_initialized():
        raise RuntimeError("a Ray cluster is already initialised in this process; the rehearsal starts its own")
    cluster = None
    # Ray starts one idle worker per declared CPU when the first driver connects (192 processes for 1x8x192 on a
    # 2-core host): none of them can serve a rehearsal's actors (each asks for its own runtime environment), so
    # they only cost start-up time. Ray's system config (set at the head, read by every raylet) turns that off.
    system_config = {"prestart_worker_first_driver": False}
    if nodes == 1:
        with workers_start_with(worker_env()):
            ray.init(
                address="local",
                num_cpus=cpus_per_node,
                num_gpus=gpus_per_node,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                _system_config=system_config,
                logging_level="ERROR",
                log_to_driver=False,
            )
    else:
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "num_gpus": 0, "_system_config": system_config},
        )
        for _ in range(nodes):
            cluster.add_node(num_cpus=cpus_per_node, num_gpus=gpus_per_node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def check_cluster_shape(spec: ExperimentSpec) -> None:
    """The running cluster declares the recipe's nodes and GPUs (a shared test cluster of another shape would prove
    nothing about this recipe)."""
    import ray

    nodes, gpus, _ = cluster_shape(spec)
    have = sorted(int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU"))
    if have != [gpus] * nodes:
        raise RuntimeError(
            f"the Ray cluster has GPU nodes {have}; hardware={spec.hardware.name} declares {nodes} x {gpus}"
        )


# -- the rehearsal ----------------------------------------------------------------------------------------------


class _EngineCalls:
    """The engines as HybridSchedule sees them (RolloutEngines' sleep/wake), on the placed, unstarted actors."""

    def __init__(self, actors: list[Any], timeout_s: float) -> None:
        self.actors, self.timeout_s = actors, timeout_s

    def sleep(self, level: int = 1) -> None:
        import ray

        ray.get([a.sleep.remote(level) for a in self.actors], timeout=self.timeout_s)

    def wake(self, tags: list[str] | None = None) -> None:
        import ray

        ray.get([a.wake.remote(tags) for a in self.actors], timeout=self.timeout_s)

    def states(self) -> list[tuple[str, ...]]:
        import ray

        return [tuple(s) for s in ray.get([a.memory_state.remote() for a in self.actors], timeout=self.timeout_s)]


def rehearse(spec: ExperimentSpec, plan: Plan, *, timeout_s: float = 300.0) -> Rehearsal:
    """Start-up of ``spec`` on the Ray cluster this process is connected to (see :func:`simulated_cluster`), checked;
    every actor is ended afterwards, the cluster kept."""
    import ray

    from rlhf.launch.realize import realize
    from rlhf.pipelines.rl_roles import HybridSchedule, takes_turns
    from rlhf.pipelines.role_set import start_role_actors
    from rlhf.spec.rollout_backend_rules import generates_in_policy

    t0 = time.monotonic()
    check_cluster_shape(spec)
    # every wait bounded by the rehearsal's own timeout, not the run's half-hour one
    spec = replace(spec, trainer=replace(spec.trainer, remote_timeout_s=timeout_s, startup_timeout_s=None))
    out = Rehearsal(spec.recipe or "(no recipe)")
    realized = realize(spec, plan, timeout_s=timeout_s)
    node_index = _node_index()
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        out.timings[name] = now - mark
        mark = now

    lap("placement groups")
    try:
        actors = start_role_actors(spec, realized, None)
        in_policy = "rollout" in plan.roles and generates_in_policy(spec)  # the policy's ranks generate
        fused = {
            "policy": [r for r, f in (("reference", actors.fuse_ref), ("teacher", actors.fuse_teacher)) if f]
            + ["rollout"] * in_policy,
            "critic": ["reward"] if actors.fuse_rm else [],
        }
        places: dict[str, list[dict[str, Any]]] = {}
        for role, group in actors.groups().items():
            places[role] = group.run_all("placement")
            label = "+".join([role, *fused.get(role, [])])
            for rank, (pl, bundle) in enumerate(zip(places[role], group.bundles, strict=True)):
                out.procs.append(
                    Proc(
                        role,
                        f"{label} rank {rank} (pid {pl['pid']})",
                        node_index[pl["node_id"]],
                        bundle,
                        group.resources["GPU"],
                        "(all: NOSET)" if pl["noset"] else _cvd(pl["cuda_visible_devices"]),
                        pl["local_rank"],
                        f"{pl['rank']}/{pl['world_size']}",
                        pl["device"],
                        pl["pid"],
                        tuple(pl["gpu_ids"]),
                        rank_env=pl["rank_env"],
                    )
                )
        lap("trainer actors")
        engines: list[dict[str, Any]] = []
        started = None
        if "rollout" in plan.roles and not in_policy:
            started = realized.start_rollout(spec.model.path or "(the policy's weights)", None, start=False)
            # every engine at once: all TP workers must fit beside the trainers together, as in a run
            engines = _engine_reports(started, timeout_s)
            _engine_procs(out, started, engines, node_index)
            lap("engines")
        _check_devices(out, plan, spec)
        if started is not None:
            _sync_group(out, spec, places, engines, node_index)
            colocated = realized.colocated("rollout", "policy")
            schedule = HybridSchedule(
                takes_turns(spec, colocated), _EngineCalls(started.actors, timeout_s), lambda: None, lambda: None
            )
            _check_phases(out, plan, realized.placement("rollout").group, schedule)
            lap("sync group and phases")
    finally:
        realized.kill_actors()
        for s in realized.executor.slots.values():
            try:
                ray.util.remove_placement_group(s.pg)
            except Exception:  # noqa: BLE001 - gone already
                pass
    out.seconds = time.monotonic() - t0
    return out


def _cvd(value: str | None) -> str:
    return "(unset)" if value is None else (value or '""')


def _node_index() -> dict[str, int]:
    """Ray node id -> node index, counting only nodes that hold GPUs (in the order Ray lists them)."""
    import ray

    gpu_nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
    return {n: i for i, n in enumerate(gpu_nodes)}


def _engine_reports(started: Any, timeout_s: float) -> list[dict[str, Any]]:
    """Each engine's :meth:`rlhf.backends.contract.rollout.RolloutEngine.rehearse`, the wait bounded; a failure is
    reported,
    not raised, so the device map shows every engine."""
    import ray

    refs = [a.rehearse.remote(timeout_s) for a in started.actors]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s + 30)
    out = []
    for i, ref in enumerate(refs):
        done, _ = ray.wait([ref], timeout=0)
        if not done:
            out.append({"error": f"did not answer within {timeout_s + 30:.0f} s; {started.where[i]}"})
            continue
        try:
            out.append(ray.get(ref))
        except ray.exceptions.RayError as e:
            cause = [ln for ln in str(e).strip().splitlines() if ln.strip()][-1:] or [type(e).__name__]
            out.append({"error": cause[0]})
    return out


def _engine_procs(out: Rehearsal, started: Any, engines: list[dict[str, Any]], node_index: dict[str, int]) -> None:
    for i, (p, rep) in enumerate(zip(started.placements, engines, strict=True)):
        if "error" in rep:
            out.violations.append(f"role rollout, engine {i}: {rep['error']}")
            continue
        env = rep.get("env", {})
        note = " ".join(f"{k}={v}" for k, v in env.items())
        tp = len(p.bundles)
        out.procs.append(
            Proc(
                "rollout",
                f"engine {i} (pid {rep['pid']})",
                node_index.get(rep["node_id"], -1),
                p.actor_bundle,
                p.actor_gpus,
                _cvd(rep.get("cuda_visible_devices")),
                None if tp > 1 else 0,
                "-",
                rep["workers"][0]["device"] if tp == 1 else None,
                rep["pid"],
                tuple(rep.get("gpu_ids", ())),
                note,
            )
        )
        if tp > 1:
            for w in rep["workers"]:
                out.procs.append(
                    Proc(
                        "rollout",
                        f"  engine {i} TP worker {w['rank']}",
                        node_index.get(w["node_id"], -1),
                        w["bundle"],
                        w["gpus"],
                        "(vLLM sets it)",
                        w["local_rank"],
                        f"{w['rank']}/{tp}",
                        w["device"],
                        None,
                        tuple(w["gpu_ids"]),
                    )
                )


def _check_devices(out: Rehearsal, plan: Plan, spec: ExperimentSpec) -> None:
    """Shares per device, each process on its own reservation, TP workers and training groups on distinct devices,
    colocated roles on exactly their group's devices."""
    if spec.hardware.accelerator != "gpu":
        return
    computing = [p for p in out.procs if p.device is not None]
    used: dict[tuple[int, int], float] = {}
    for p in out.procs:
        for g in p.ray_gpus:
            used[(p.node, g)] = used.get((p.node, g), 0.0) + p.gpus
        if p.device is not None and p.ray_gpus and p.device not in p.ray_gpus:
            out.violations.append(
                f"role {p.role}, {p.label.strip()}: computes on node{p.node}:gpu{p.device} but Ray reserved "
                f"gpu{list(p.ray_gpus)} for it"
            )
        if p.device is not None and not p.ray_gpus and p.gpus == 0:
            out.violations.append(
                f"role {p.role}, {p.label.strip()}: computes on node{p.node}:gpu{p.device} "
                "without any GPU share reserved"
            )
    for (node, g), share in used.items():
        if share > 1 + 1e-6:
            holders = ", ".join(p.label.strip() for p in out.procs if g in p.ray_gpus and p.node == node)
            out.violations.append(f"device node{node}:gpu{g} is given {share:.2f} of itself ({holders})")
    # distinct devices: within one training group, and for TP workers across all engines
    by_group: dict[str, list[Proc]] = {}
    for p in computing:
        key = "rollout" if p.role == "rollout" else p.label.split(" rank ")[0]
        by_group.setdefault(key, []).append(p)
    for key, procs in by_group.items():
        seen: dict[tuple[int, int], Proc] = {}
        for p in procs:
            d = (p.node, p.device)
            if d in seen:
                what = "TP workers / engines" if key == "rollout" else f"the {key} training group"
                out.violations.append(
                    f"role {p.role}, {p.label.strip()} and {seen[d].label.strip()} share node{d[0]}:gpu{d[1]} in "
                    f"{what} (each needs a device of its own; NCCL refuses two members on one GPU)"
                )
            seen[d] = p
    # colocated roles share exactly the devices of their plan group; groups share none
    group_devices: dict[int, set[tuple[int, int]]] = {}
    for g in plan.groups:
        sets = {}
        for role in g.roles:
            devs = {(p.node, p.device) for p in computing if p.role == role}
            if devs:
                sets[role] = devs
        if not sets:
            continue
        first_role, first = next(iter(sets.items()))
        for role, devs in sets.items():
            if devs != first:
                out.violations.append(
                    f"role {role} computes on {_devs(devs)} but {first_role}, colocated with it, on {_devs(first)}"
                )
        if len(first) != g.size:
            out.violations.append(
                f"roles {'+'.join(g.roles)}: the plan gives them {g.size} devices, they use "
                f"{len(first)} ({_devs(first)})"
            )
        for other, devs in group_devices.items():
            if devs & first:
                out.violations.append(
                    f"roles {'+'.join(g.roles)} and {'+'.join(plan.groups[other].roles)} share "
                    f"{_devs(devs & first)} although the plan gives them separate devices"
                )
        group_devices[g.index] = first


def _devs(devs: set[tuple[int, int]]) -> str:
    return ",".join(f"node{n}:gpu{d}" for n, d in sorted(devs))


def _sync_group(
    out: Rehearsal, spec: ExperimentSpec, places: dict[str, list[dict[str, Any]]], engines: list[dict], nodes: dict
) -> None:
    """The weight-sync group exactly as WeightSync.connect forms it, from each member's own device."""
    from rlhf.backends.weight_sync.driver import choose_routes, sync_ranks

    if any("error" in e for e in engines) or "policy" not in places:
        return
    ro, hw = spec.rollout, spec.hardware

    def loc(node_id: str, device: int | None) -> dict[str, Any]:
        return {"node_ip": "127.0.0.1", "node_id": node_id, "device": device, "gpu_uuid": None}

    sender = loc(places["policy"][0]["node_id"], places["policy"][0]["device"])
    workers = [[loc(w["node_id"], w["device"]) for w in e["workers"]] for e in engines]
    out.sync_backend = ro.weight_sync_backend or ("nccl" if hw.accelerator == "gpu" else "gloo")
    if ro.weight_sync == "object_store":
        out.sync.append(("policy rank 0 -> driver -> engines", 0, "object_store", "-"))
        return
    try:
        routes = choose_routes(ro.weight_sync, sender, workers, hw.accelerator, ro.weight_sync_backend)
    except UserError as e:
        out.violations.append(f"role rollout, weight sync: {e}")
        return
    first, _, _ = sync_ranks(routes)
    dev = f"node{nodes[sender['node_id']]}:gpu{sender['device']}"
    out.sync.append(("policy rank 0 (sender)", 0, "-", dev))
    for i, ws in enumerate(workers):
        for k, w in enumerate(ws):
            device = f"node{nodes.get(w['node_id'], -1)}:gpu{w['device']}"
            out.sync.append((f"rollout engine {i} worker {k}", first[i] + k, routes[i][k], device))


def _check_phases(out: Rehearsal, plan: Plan, group: int, schedule: Any) -> None:
    """Drive the engines through the run's schedule (start, generation, train, sync, generation) and compare what
    they and the trainers hold in each phase with the plan's phases for the rollout's group."""
    expected = plan.phases[group] if plan.phases else {}
    steps = [
        ("start", schedule.engines_started),
        ("generation", schedule.begin_generation),
        ("train", lambda: schedule.end_generation(True)),
        ("sync", schedule.begin_sync),
        ("generation", schedule.begin_generation),
    ]
    for phase, step in steps:
        step()
        states = set(schedule.engines.states())
        trained = ("states", "weights") if schedule.trainers_resident else ("weights",)
        engine = sorted(states)[0] if len(states) == 1 else None
        out.phases.append((phase, f"trainers {'+'.join(trained)}; engines {'+'.join(engine or ()) or 'asleep'}"))
        want = expected.get(phase)
        if want is None:
            continue
        if len(states) != 1:
            out.violations.append(f"role rollout, phase {phase}: the engines disagree on what they hold ({states})")
        elif tuple(sorted(engine)) != tuple(want["rollout"]):
            out.violations.append(
                f"role rollout, phase {phase}: the engines hold {list(engine) or 'nothing'}, the plan counts "
                f"{list(want['rollout']) or 'nothing'}"
            )
        if tuple(sorted(trained)) != tuple(want["trained"]):
            out.violations.append(
                f"trained roles, phase {phase}: they hold {list(trained)}, the plan counts {list(want['trained'])}"
            )
