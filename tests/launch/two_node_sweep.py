"""Run by test_ray_cluster_launcher.py in its own process: a simulated two-node Ray cluster on this machine (Ray's
own cluster utilities, loopback only; the head node holds no CPUs, so jobs run on the two worker nodes), then each
rlhf-run command of argv[2] (a JSON list of argument lists) attached to it, as a user would type it. Prints one
RESULT line of JSON: the worker nodes' ids and each command's exit code and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the ceilings every test waits under
from ceilings import ceiling  # noqa: E402

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before ray is imported: loopback only


def main(workdir: str, commands_json: str) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    rlhf_run = str(Path(sys.executable).parent / "rlhf-run")
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    runs = []
    try:
        for args in json.loads(commands_json):
            p = subprocess.run(
                [rlhf_run, *args, f"ray.address={cluster.address}"],
                capture_output=True,
                text=True,
                cwd=workdir,
                env=env,
                timeout=ceiling(1200),
            )
            runs.append({"rc": p.returncode, "stdout": p.stdout[-20000:], "stderr": p.stderr[-20000:]})
    finally:
        cluster.shutdown()
    print("RESULT " + json.dumps({"worker_nodes": sorted(n.node_id for n in nodes), "runs": runs}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
