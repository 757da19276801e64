"""Placement groups reserved for a job before it starts, and whether a job's bundles can ever fit a cluster.

The ``ray_cluster`` launcher reserves each job's placement groups (one per device group of the job's plan, named
``<prefix>-g<index>``) and starts the job only once Ray has placed them all; the job's ``realize`` then adopts them
by name instead of creating its own, so a job that waited in the queue never meets realize's placement timeout.
The job learns its prefix from :data:`RESERVED_ENV` in its process environment.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from rlhf.planning.plan import DeviceGroup, Plan

log = logging.getLogger(__name__)

RESERVED_ENV = "RLHF_RESERVED_PLACEMENT"
_EPS = 1e-9
_SEARCH_BUDGET = 200_000  # placement attempts before fits_on gives the benefit of the doubt


def group_name(prefix: str, group: int) -> str:
    return f"{prefix}-g{group}"


def bundles_of(plan: Plan) -> list[dict[str, float]]:
    """Every bundle the plan's placement groups request, all groups together."""
    return [dict(g.bundle) for g in plan.groups for _ in range(g.size)]


def fits_on(bundles: Sequence[Mapping[str, float]], nodes: Sequence[Mapping[str, float]]) -> bool:
    """Whether ``bundles`` can all be held at once by ``nodes`` (total resources per node), each bundle on one node.
    Exact for small cases; a search too large to finish is taken to fit (the queue then waits for it)."""
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    for k, v in need.items():
        if sum(n.get(k, 0.0) for n in nodes) + _EPS < v:
            return False
    if any(not any(_holds(n, b) for n in nodes) for b in bundles):
        return False
    order = sorted(bundles, key=lambda b: -sum(b.values()))
    free = [dict(n) for n in nodes]
    steps = 0

    def place(i: int) -> bool:
        nonlocal steps
        if i == len(order):
            return True
        tried = set()
        for n in free:
            state = tuple(sorted(n.items()))
            if state in tried or not _holds(n, order[i]):
                continue
            tried.add(state)
            steps += 1
            if steps > _SEARCH_BUDGET:
                return True
            for k, v in order[i].items():
                n[k] -= v
            ok = place(i + 1)
            for k, v in order[i].items():
                n[k] += v
            if ok:
                return True
        return False

    return place(0)


def _holds(node: Mapping[str, float], bundle: Mapping[str, float]) -> bool:
    return all(node.get(k, 0.0) + _EPS >= v for k, v in bundle.items())


def node_resources() -> list[dict[str, float]]:
    """Total CPU/GPU (and custom) resources of every alive node of the connected Ray cluster."""
    import ray

    skip = ("memory", "object_store_memory")
    out = []
    for n in ray.nodes():
        if n.get("Alive"):
            res = n.get("Resources", {})
            out.append({k: float(v) for k, v in res.items() if k not in skip and not k.startswith("node:")})
    return out


def reserve(plan: Plan, prefix: str) -> list[Any]:
    """Request the plan's placement groups under the names realize adopts; Ray places them when it can."""
    from ray.util.placement_group import placement_group

    return [
        placement_group([dict(g.bundle) for _ in range(g.size)], strategy="PACK", name=group_name(prefix, g.index))
        for g in plan.groups
    ]


def release(pgs: Sequence[Any]) -> None:
    import ray

    for pg in pgs:
        try:
            ray.util.remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - already removed by the job's own shutdown
            pass


def describe(pgs: Sequence[Any]) -> list[dict[str, Any]]:
    """Each placement group's name, bundles and the node of every bundle (Ray's own table)."""
    from ray.util.placement_group import placement_group_table

    out = []
    for pg in pgs:
        t = placement_group_table(pg)
        out.append(
            {
                "name": t.get("name"),
                "bundles": [t["bundles"][i] for i in sorted(t["bundles"])],
                "nodes": [t["bundles_to_node_id"].get(i) for i in sorted(t["bundles"])],
                "state": t.get("state"),
            }
        )
    return out


def adopt_reserved(group: DeviceGroup) -> Any | None:
    """The placement group a launcher reserved for ``group`` of this job, or None (then realize creates one)."""
    prefix = os.environ.get(RESERVED_ENV)
    if not prefix:
        return None
    import ray
    from ray.util.placement_group import placement_group_table

    name = group_name(prefix, group.index)
    try:
        pg = ray.util.get_placement_group(name)
    except ValueError:
        return None
    table = placement_group_table(pg)
    bundles = [table["bundles"][i] for i in sorted(table["bundles"])]
    if bundles != [dict(group.bundle) for _ in range(group.size)]:
        log.warning("placement group %s does not hold this plan's bundles (%s); making a new one", name, bundles)
        return None
    log.info("placement group %s reserved by the launcher: %d bundle(s) of %s", name, group.size, group.bundle)
    return pg
