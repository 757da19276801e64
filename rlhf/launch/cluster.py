"""Starting a private local Ray cluster on 127.0.0.1, or attaching to an existing one (``ray.address``).

A private cluster lives as long as this process (Ray ties its processes to the driver's); an attached cluster is
left running. A Ray already initialised in this process (a notebook, the test session) is reused as it is.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

from rlhf.spec.schema import RaySpec

log = logging.getLogger(__name__)

# Ray's public switch (read when ray is imported) that keeps a cluster it starts on 127.0.0.1 (machine.md).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# Set in every worker process: quiet tokenizers fork warnings; keep DeepSpeed's and Ray's chatter down.
WORKER_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_DEDUP_LOGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
# Passed through to workers when set on the driver (a private cluster inherits them anyway; an attached one not).
PASS_THROUGH_ENV = ("RLHF_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RLHF_VLLM_PYTHON")


@dataclass
class Cluster:
    """The Ray cluster this job runs on."""

    address: str
    started_here: bool  # a private cluster (shut down with the job) vs an attached/pre-existing one
    node_ip: str  # this driver's node ip

    def actor_env(self) -> dict[str, str]:
        """Network settings for every actor: on a private local cluster gloo binds the loopback interface (it
        otherwise binds the address the host name resolves to); on a real cluster the node's own interface."""
        if self.started_here and self.node_ip.startswith("127."):
            ifname = loopback_interface()
            return {"GLOO_SOCKET_IFNAME": ifname} if ifname else {}
        return {}

    def shutdown(self) -> None:
        import ray

        if self.started_here and ray.is_initialized():
            ray.shutdown()


def worker_log(pid: int | None) -> str | None:
    """The newest Ray worker log (stderr) of process ``pid``, under Ray's default temp folder, or None."""
    if not pid:
        return None
    import glob

    base = os.environ.get("RAY_TMPDIR", "/tmp/ray")
    found = glob.glob(os.path.join(base, "session_*", "logs", f"worker-*-{pid}.err"))
    return max(found, key=os.path.getmtime) if found else None


def loopback_interface() -> str | None:
    """The loopback interface's name (lo on Linux, lo0 on macOS)."""
    import socket

    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n in ("lo", "lo0")), next((n for n in names if n.startswith("lo")), None))


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(WORKER_ENV)
    env.update({k: os.environ[k] for k in PASS_THROUGH_ENV if k in os.environ})
    env.update(extra or {})
    return env


def keep_private_cluster_on_loopback(ray_spec: RaySpec) -> None:
    """Ray's own switch for a cluster on 127.0.0.1 only, for a job that will start a private cluster. Ray reads it
    once, when ray is first imported, so call this before anything imports ray: rlhf-run does, as soon as the spec
    is built, and rlhf.launch.job.run. An attached cluster keeps its interfaces (its nodes must reach each other)."""
    if ray_spec.address or LOOPBACK_ENV in os.environ:
        return
    os.environ[LOOPBACK_ENV] = "0"
    if "ray" in sys.modules:
        log.warning(
            "ray was imported before %s=0 was set; a private cluster may also listen on the external interface",
            LOOPBACK_ENV,
        )


def start_or_attach(ray_spec: RaySpec, *, num_cpus: int | None = None, num_gpus: int | None = None) -> Cluster:
    """Attach to ``ray_spec.address`` when set, else start a private cluster on 127.0.0.1 with ``num_cpus``
    logical CPUs (``ray.num_cpus`` wins; at least the machine's count, so Ray never starves our bundles)."""
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        return Cluster(address=ctx.gcs_address, started_here=False, node_ip=ray.util.get_node_ip_address())
    runtime_env = {"env_vars": worker_env(dict(ray_spec.runtime_env))}
    if ray_spec.address:
        log.info("attaching to the Ray cluster at %s", ray_spec.address)
        ray.init(address=ray_spec.address, runtime_env=runtime_env, log_to_driver=True)
        return Cluster(
            address=ray.get_runtime_context().gcs_address, started_here=False, node_ip=ray.util.get_node_ip_address()
        )
    # A private cluster cannot outlive its GCS (a SIGTERM to the whole process group stops it first): its clients
    # give up after 15 s instead of Ray's 60, so the run's teardown does not hang a minute on a dead cluster.
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", "15")
    cpus = ray_spec.num_cpus or max(num_cpus or 1, os.cpu_count() or 1)
    store = int(ray_spec.object_store_gb * 1024**3) if ray_spec.object_store_gb else None
    ray.init(
        address="local",
        num_cpus=cpus,
        num_gpus=num_gpus,
        object_store_memory=store,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env=runtime_env,
        log_to_driver=True,
        configure_logging=True,
        logging_level=logging.WARNING,
        _system_config={"worker_niceness": ray_spec.worker_niceness},
    )
    start_reaper()
    return Cluster(address=ray.get_runtime_context().gcs_address, started_here=True, node_ip="127.0.0.1")


_reaper_started = False


def start_reaper() -> None:
    """Once per process: a watcher that ends this process's private Ray cluster if the process dies without
    shutting it down (rlhf.launch.reaper)."""
    global _reaper_started
    if _reaper_started:
        return
    import subprocess
    import sys

    subprocess.Popen(
        [sys.executable, "-m", "rlhf.launch.reaper", str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ["RLHF_REAPER_LOG"], "a") if os.environ.get("RLHF_REAPER_LOG") else subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    _reaper_started = True
