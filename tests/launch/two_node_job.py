"""Run by test_two_node_cluster.py in its own process: a simulated two-node Ray cluster on this machine (Ray's own
cluster utilities, loopback only), an RL job attached to it, and where that job's actors ran, printed as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def actor_nodes(address: str) -> dict[str, str]:
    """Every actor the cluster at ``address`` ran, alive or ended, by actor id: the node its process ran on. The
    address is given: without it Ray's state API takes the newest Ray instance on the machine, which beside a
    concurrent test's cluster is that one (CI's Ray tier under load: "Could not read 'dashboard' from GCS")."""
    from ray.util.state import list_actors

    return {a.actor_id: a.node_id for a in list_actors(address=address, limit=10000)}


def watching(realize, started: dict[str, list]):
    """``realize`` whose Realized records the actor handles of each role group and of the rollout engines as the
    job starts them (into ``started``: role -> handles), so that where they ran can be read after the job."""

    def realize_and_watch(spec, plan):
        realized = realize(spec, plan)
        create_group, start_rollout = realized.create_group, realized.start_rollout

        def create_and_record(role, *args, **kwargs):
            group = create_group(role, *args, **kwargs)
            started.setdefault(role, []).append(list(group.actors))
            return group

        def start_and_record(*args, **kwargs):
            engines = start_rollout(*args, **kwargs)
            started.setdefault("rollout", []).append(list(engines.actors))
            return engines

        realized.create_group, realized.start_rollout = create_and_record, start_and_record
        return realized

    return realize_and_watch


def main(run_dir: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from rlhf.launch.cluster import set_ray_env
    from rlhf.launch.realize import realize
    from rlhf.pipelines import run as run_pipeline
    from rlhf.planning.plan import plan
    from rlhf.spec import check
    from rlhf.spec.build import load_spec

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    spec = load_spec(
        [
            "+recipe=grpo_tiny_cpu",
            f"ray.address={cluster.address}",
            "hardware.nodes=2",
            "hardware.devices_per_node=1",
            "rollout.num_engines=2",
            "rollout.prompts_per_step=8",
            "trainer.global_batch=32",
            "trainer.micro_batch_per_device=16",
            "trainer.max_steps=2",
            "eval.steps=0",
            "logging.mlflow=false",
            "logging.progress=false",
        ]
    )
    check(spec)
    # One job, as rlhf.launch.job.run starts it, with the realize it hands the pipeline watched: where its policy
    # ranks and engines ran is read from Ray's actor table once the job is done (ended actors stay listed there).
    set_ray_env(spec.ray)
    started: dict[str, list] = {}
    result = run_pipeline(spec, plan(spec), Path(run_dir), watching(realize, started))
    where = actor_nodes(cluster.address)
    # one start of each (no restart): rank i's and engine i's handles in rank order
    (policy,), (rollout,) = started["policy"], started["rollout"]
    out = {
        "worker_nodes": sorted(n.node_id for n in nodes),
        "policy_nodes": [where[a._actor_id.hex()] for a in policy],
        "rollout_nodes": [where[a._actor_id.hex()] for a in rollout],
        "steps": result["steps"],
    }
    print("RESULT " + json.dumps(out))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
