"""``hydra/launcher=ray_cluster``: every job of a multirun on one Ray cluster, each with the resources of its own plan.

How a job runs: as a Ray task on the cluster (0 CPUs, its own worker process, on the launcher's node where it can)
that runs the ordinary Hydra job (``run_job``), so the job's pipeline is a driver-side program already attached to
the same cluster. Chosen over ``ray job submit`` (JobSubmissionClient) because it needs no dashboard or job agent
(private clusters run without them; token auth on Ray 2.60 clusters), hands Hydra's state (ConfigStore, recipes
given as files) to the job as Python objects, and returns the job's JobReturn and objective directly.

Scheduling: for each job the launcher computes the plan (rlhf.planning.plan) and reserves its placement groups; Ray
places them when the cluster has room, and only then does the job start and adopt them (realize's placement
timeout never runs on a queued job). One job at a time waits for its reservation (first come, first served, and two
half-placed reservations can never block each other); at most ``max_concurrent`` jobs run at once. A job whose
bundles can never fit the cluster's nodes is reported before any job starts. A failed job fails alone; the summary
(``sweep_summary.json`` in the sweep folder, and the log) lists every job's status, wall time and objective.
"""

# No `from __future__ import annotations` here: Hydra's plugin scan runs this module before it is in sys.modules,
# where dataclasses cannot read string annotations.
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class RayClusterLauncherConf:
    _target_: str = "hydra_plugins.rlhf_plugins.ray_cluster_launcher.RayClusterLauncher"
    # The cluster: null takes the jobs' ray.address; empty there too starts a private cluster on 127.0.0.1.
    address: str | None = None
    # Jobs running at once; null: as many as the cluster holds.
    max_concurrent: int | None = None
    # Seconds a job may wait for its resources before it is failed; null: as long as it takes.
    queue_timeout_s: float | None = None
    # A private cluster's logical CPUs; null: enough for the largest job (at least this machine's count).
    num_cpus: int | None = None
    # Seconds between looks at the queue.
    poll_s: float = 1.0


ConfigStore.instance().store(group="hydra/launcher", name="ray_cluster", node=RayClusterLauncherConf, provider="rlhf")


class RayClusterLauncher(Launcher):
    def __init__(self, **kwargs: Any) -> None:
        self.options = RayClusterLauncherConf(**{k: v for k, v in kwargs.items() if k != "_target_"})
        self.runner: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra_plugins.rlhf_plugins._ray_cluster import SweepRunner

        self.runner = SweepRunner(self.options, hydra_context=hydra_context, task_function=task_function, config=config)

    def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
        assert self.runner is not None, "setup() first"
        returns: list[JobReturn] = self.runner.launch(job_overrides, initial_job_idx)
        return returns
