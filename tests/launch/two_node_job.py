"""Run by test_two_node_cluster.py in its own process: a simulated two-node Ray cluster on this machine (Ray's own
cluster utilities, loopback only), an RL job attached to it, and where its actors landed, printed as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def actor_nodes() -> dict[int, str]:
    from ray.util.state import list_actors

    return {a.pid: a.node_id for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)}


def main(run_dir: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from rlhf.launch.job import run
    from rlhf.launch.plan import plan
    from rlhf.launch.realize import realize
    from rlhf.models.loading import resolve_model_path
    from rlhf.pipelines.rl_roles import RLWorkers
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
    p = plan(spec)
    realized = realize(spec, p)
    workers = RLWorkers(spec, realized, resolve_model_path(spec.model), 1)
    where = actor_nodes()
    policy = [where[info["pid"]] for info in workers.policy.run_all("ping")]
    rollout = [where[info["pid"]] for info in workers.rollout.info]
    realized.shutdown()
    result = run(spec, p, Path(run_dir))
    out = {
        "worker_nodes": sorted(n.node_id for n in nodes),
        "policy_nodes": policy,
        "rollout_nodes": rollout,
        "steps": result["steps"],
    }
    print("RESULT " + json.dumps(out))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
