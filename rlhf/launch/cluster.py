"""Starting a private local Ray cluster on 127.0.0.1, or attaching to an existing one (``ray.address``).

A private cluster lives as long as this process (Ray ties its processes to the driver's); an attached cluster is
left running. A Ray already initialised in this process (a notebook, the test session) is reused as it is.

A SIGTERM sent to the whole process group (``timeout``, SLURM, Kubernetes) reaches the driver and Ray's own
processes at once. A private cluster's GCS, raylet and agents are therefore started with SIGTERM blocked (a
signal mask is inherited through fork and exec, the way Ray itself starts them with SIGINT blocked): the group
signal then reaches only the driver, which stops at the next step boundary with a checkpoint and exit status 130,
exactly as after a single SIGTERM. Ray's workers unblock it again (rlhf.launch.worker_preload), and the driver ends
the cluster itself (:meth:`Cluster.shutdown`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf.errors import UserError
from rlhf.launch import worker_preload
from rlhf.planning.preflight.ray_address import is_loopback_address
from rlhf.spec.schema import RaySpec

log = logging.getLogger(__name__)

# Ray's public switch (read when ray is imported) that keeps a cluster it starts on 127.0.0.1 (machine.md).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Ray's public switch for token authentication. Unset, ray.init turns it on for a new local cluster and warns that
# it did, on every run; set to "token" it does the same without the warning (authentication_token_setup: "mode set
# explicitly; respect it without warning"). Safe: the cluster is exactly as protected as by default.
AUTH_ENV = "RAY_AUTH_MODE"
# DeepSpeed's public switch for its accelerator. Unset, a process without a CUDA device probes for one and warns
# "Setting accelerator to CPU. If you have GPU ...". Set for the workers of a job whose plan asks for no GPU: CPU is
# what the probe falls back to there, so naming it changes nothing but the warning.
DS_ACCELERATOR_ENV = "DS_ACCELERATOR"

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
    warm_folder: Path | None = None  # the preloading workers' slots (rlhf.launch.worker_preload)
    warm_count: int = 0

    def wait_warm(self) -> None:
        """Before the job's first actor: wait until the workers preloading for it are idle (at once when none do,
        or after the first time). An actor placed while its worker still imports gets a fresh process instead,
        which imports everything again (measured on the 2-core machine: 32-36 busy CPU-seconds to the first step
        instead of 22)."""
        if self.warm_folder is not None and self.warm_count > 0:
            worker_preload.wait_ready(self.warm_folder, self.warm_count)
            self.warm_count = 0

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
            _shutdown_private_cluster()
        if self.warm_folder is not None:
            shutil.rmtree(self.warm_folder, ignore_errors=True)


def _shutdown_private_cluster() -> None:
    """``ray.shutdown()`` without its second per process spent on a SIGTERM these processes hold blocked (then it
    kills them, which is what happens here at once). Private API, no public one does this: ``ray._private.worker.
    _global_node``, the head node ray.init made, is taken away so ray.shutdown only disconnects this driver (its
    GCS must be up for that), then its processes are killed the way ray.shutdown does after the wait. Without that
    attribute (another Ray version) plain ray.shutdown, about a second slower per process."""
    import ray

    try:
        from ray._private import worker as ray_worker
    except ImportError:
        ray.shutdown()
        return
    node = getattr(ray_worker, "_global_node", None)
    if node is None or not hasattr(node, "kill_all_processes"):
        ray.shutdown()
        return
    ray_worker._global_node = None
    started = _descendants_of_node(node)  # the raylet's agents and workers: they go with it
    try:
        ray.shutdown()
    finally:
        try:
            if node.is_head():
                node.destroy_external_storage()
        finally:
            node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            _kill_all(started)


def _descendants_of_node(node: object) -> list:
    """Every process below the node's own (its agents, workers and what they started), to end with it: they would
    otherwise notice the raylet's death only seconds later."""
    import psutil

    out = []
    for infos in getattr(node, "all_processes", {}).values():
        for info in infos:
            try:
                out += psutil.Process(info.process.pid).children(recursive=True)
            except (psutil.Error, AttributeError):
                continue
    return out


def _kill_all(processes: list) -> None:
    import psutil

    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.kill()  # psutil checks the start time first: a recycled pid is left alone
    psutil.wait_procs(processes, timeout=5)


@contextlib.contextmanager
def _sigterm_blocked() -> Iterator[None]:
    """SIGTERM blocked in this thread while Ray starts its processes from it (they inherit the mask)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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


# (GCS address, variables) of the private cluster this process started last.
_worker_start_env: tuple[str, dict[str, str]] | None = None


def worker_start_env() -> dict[str, str] | None:
    """The variables every worker of the cluster this process is connected to begins with, when this process
    started it as a private cluster (None otherwise: an attached cluster, whose workers get them through the job's
    runtime_env, or a cluster started some other way, e.g. the rehearsal's several simulated nodes)."""
    import ray

    if _worker_start_env is None or not ray.is_initialized():
        return None
    address, env = _worker_start_env
    return env if ray.get_runtime_context().gcs_address == address else None


@contextlib.contextmanager
def workers_start_with(env: dict[str, str]) -> Iterator[None]:
    """A Ray cluster started (``ray.init``) in this block on this host inherits ``env``, its workers included, and
    is recorded as the cluster whose workers begin with it (:func:`worker_start_env`), so actors set the rest of
    their variables in their process instead of a ``runtime_env`` of their own (rlhf.launch.actor_env)."""
    import ray

    global _worker_start_env
    with _environment(env):
        yield
    _worker_start_env = (ray.get_runtime_context().gcs_address, dict(env))


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in os.environ while Ray starts its processes (they inherit it), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(WORKER_ENV)
    env.update({k: os.environ[k] for k in PASS_THROUGH_ENV if k in os.environ})
    env.update(extra or {})
    return env


def set_ray_env(ray_spec: RaySpec) -> None:
    """Ray's switches for the cluster this job uses, set before anything imports ray (Ray reads them once, at its
    import): rlhf-run calls this as soon as the spec is built, and rlhf.launch.job.run.

    * A private cluster: on 127.0.0.1 only (machine.md), with token authentication named explicitly (no warning).
    * An attached cluster on this machine (``ray.address=127.0.0.1:PORT``, e.g. one ``ray start --head
      --node-ip-address=127.0.0.1`` started): Ray otherwise rewrites a loopback address to the address the host name
      resolves to, where such a cluster does not listen, and retries for minutes; the same loopback switch keeps it.
    * Any attached cluster: token authentication when a token is at hand (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``
      or Ray's default ``~/.ray/auth_token``, which ``ray start`` writes): Ray's driver does not send it unless asked,
      and a cluster started with it refuses the driver on every retry. A cluster without authentication accepts a
      driver that sends one (measured with Ray 2.60).
    An attached cluster elsewhere keeps its interfaces (its nodes must reach each other)."""
    if "ray" not in sys.modules and (not ray_spec.address or _token_at_hand()):
        os.environ.setdefault(AUTH_ENV, "token")
    if ray_spec.address and not is_loopback_address(ray_spec.address):
        return
    if LOOPBACK_ENV in os.environ:
        return
    os.environ[LOOPBACK_ENV] = "0"
    if "ray" in sys.modules:
        log.warning(
            "ray was imported before %s=0 was set; a private cluster may also listen on the external interface",
            LOOPBACK_ENV,
        )


def _token_at_hand() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return True
    return (Path.home() / ".ray" / "auth_token").is_file()  # Ray's default token file (its token-auth docs)


def start_or_attach(
    ray_spec: RaySpec,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    preload: tuple[str, ...] = (),
    warm: int = 0,
) -> Cluster:
    """Attach to ``ray_spec.address`` when set, else start a private cluster on 127.0.0.1 with ``num_cpus``
    logical CPUs (``ray.num_cpus`` wins; at least the machine's count, so Ray never starves our bundles).

    A private cluster's workers start with the job's variables in their environment (inherited from the raylet,
    not set through a job-wide ``runtime_env``), and ``warm`` of the workers Ray prestarts import ``preload``
    before they take work (rlhf.launch.worker_preload; :meth:`Cluster.wait_warm`): Ray hands such idle workers to
    actors that name no ``runtime_env`` of their own (rlhf.launch.actor_env). An attached cluster's workers get
    the variables through the job's ``runtime_env``."""
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        return Cluster(address=ctx.gcs_address, started_here=False, node_ip=ray.util.get_node_ip_address())
    extra = {} if num_gpus or DS_ACCELERATOR_ENV in os.environ else {DS_ACCELERATOR_ENV: "cpu"}
    env = worker_env({**extra, **ray_spec.runtime_env})
    if ray_spec.address:
        log.info("attaching to the Ray cluster at %s", ray_spec.address)
        try:
            ray.init(address=ray_spec.address, runtime_env={"env_vars": env}, log_to_driver=True)
        except ConnectionError as e:
            raise UserError(
                f"ray.address={ray_spec.address!r}: could not join the Ray cluster there ({e}). If it answers but "
                "refuses this driver, it uses token authentication and this process has no token: copy the head's "
                "~/.ray/auth_token here or set RAY_AUTH_TOKEN (Ray's token-auth docs); for a cluster on this "
                "machine use ray.address=127.0.0.1:PORT (its --port)"
            ) from e
        return Cluster(
            address=ray.get_runtime_context().gcs_address, started_here=False, node_ip=ray.util.get_node_ip_address()
        )
    # A private cluster cannot outlive its GCS (a SIGTERM to the whole process group stops it first): its clients
    # give up after 15 s instead of Ray's 60, so the run's teardown does not hang a minute on a dead cluster.
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", "15")
    cpus = ray_spec.num_cpus or max(num_cpus or 1, os.cpu_count() or 1)
    store = int(ray_spec.object_store_gb * 1024**3) if ray_spec.object_store_gb else None
    if not num_gpus:
        # Measured on the 2-core dev machine: with other busy processes, OpenMP's default spin-waiting makes a
        # 2-thread forward/backward 30-70x slower; passive waiting restores single-tenant speed. libgomp reads it
        # when torch loads it, so it is in every worker from its start.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    warm = min(warm, cpus) if preload else 0  # Ray prestarts one worker per CPU
    # named for this process, so its reaper removes it when a SIGKILL leaves no chance to (rlhf.launch.reaper)
    folder = Path(tempfile.mkdtemp(prefix=worker_preload.folder_prefix(os.getpid()))) if warm else None
    env.update(worker_preload.env(preload, folder, warm))
    with _sigterm_blocked(), workers_start_with(env):
        _init_private(ray_spec, cpus, num_gpus, store)
    start_reaper()
    return Cluster(
        address=ray.get_runtime_context().gcs_address,
        started_here=True,
        node_ip="127.0.0.1",
        warm_folder=folder,
        warm_count=warm,
    )


def _init_private(ray_spec: RaySpec, cpus: int, num_gpus: int | None, store: int | None) -> None:
    import ray

    ray.init(
        address="local",
        num_cpus=cpus,
        num_gpus=num_gpus,
        object_store_memory=store,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
        configure_logging=True,
        logging_level=logging.WARNING,
        _system_config={
            "worker_niceness": ray_spec.worker_niceness,
            "preload_python_modules": [worker_preload.__name__],
            # Ray ends idle workers above this many; unset, it counts the CPUs no placement group holds, so once
            # the job's groups hold every CPU it ended the preloaded idle workers before any actor could take one
            # (measured with Ray 2.60: set to the CPUs, two actors took the two idle workers in 0.1-0.2 s).
            "num_workers_soft_limit": cpus,
        },
    )


_reaper_started = False
_runs_file: Path | None = None
_runs_lock = threading.Lock()


def _runs_path() -> Path:
    """The file listing this process's run folders, for the reaper (made on first use, removed by the reaper)."""
    global _runs_file
    with _runs_lock:
        if _runs_file is None:
            fd, name = tempfile.mkstemp(prefix="rlhf-runs-", suffix=".txt")
            os.close(fd)
            _runs_file = Path(name)
        return _runs_file


def watch_run_dir(run_dir: Path) -> None:
    """Tell this process's reaper about ``run_dir``: if the process dies without ending its attempt there, the
    reaper ends the attempt's runs FAILED in every tracker (rlhf.pipelines.attempt.end_if_dead)."""
    with _runs_path().open("a") as f:
        f.write(f"{Path(run_dir).resolve()}\n")


def start_reaper() -> None:
    """Once per process: a watcher that ends this process's private Ray cluster if the process dies without
    shutting it down, and the runs it left open (rlhf.launch.reaper)."""
    global _reaper_started
    if _reaper_started:
        return
    import subprocess

    subprocess.Popen(
        [sys.executable, "-m", "rlhf.launch.reaper", str(os.getpid()), str(_runs_path())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ["RLHF_REAPER_LOG"], "a") if os.environ.get("RLHF_REAPER_LOG") else subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    _reaper_started = True


def bundle_free(pg: Any, bundle_index: int) -> dict[str, float]:
    """What Ray reports free in one bundle of a placement group (its per-bundle resources ``GPU_group_<i>_<id>``)."""
    import ray

    suffix = f"_group_{bundle_index}_{pg.id.hex()}"
    return {k[: -len(suffix)]: v for k, v in ray.available_resources().items() if k.endswith(suffix)}
