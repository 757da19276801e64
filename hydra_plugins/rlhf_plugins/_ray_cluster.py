"""The ray_cluster launcher's work (see ray_cluster_launcher.py); a private module, so Hydra's plugin scan skips
it and it is imported only when the launcher is used."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import CompactHydraException
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

PLACEMENT_FILE = "placement.json"


class NeverFits(CompactHydraException):
    """Jobs whose bundles no arrangement on the cluster's nodes can hold."""


@dataclass
class _Job:
    num: int
    overrides: list[str]
    config: DictConfig | None = None
    plan: Any = None
    spec: Any = None
    bundles: list[dict[str, float]] = field(default_factory=list)
    pgs: list[Any] = field(default_factory=list)
    waiting: list[Any] = field(default_factory=list)  # pg.ready() refs not ready yet
    queued_at: float = 0.0  # handed to the launcher
    reserved_at: float = 0.0  # its placement groups requested
    started_at: float | None = None
    finished_at: float | None = None
    ret: JobReturn | None = None
    error: str | None = None  # why it failed (JobReturn's public getter raises the failure instead of returning it)
    placement: list[dict[str, Any]] = field(default_factory=list)

    @property
    def job_dir(self) -> Path | None:
        if self.config is None:
            return None
        return Path(str(self.config.hydra.sweep.dir)) / str(self.config.hydra.sweep.subdir)


def _failed(job: _Job, error: BaseException) -> JobReturn:
    ret = JobReturn(overrides=job.overrides, status=JobStatus.FAILED)
    ret.return_value = error  # JobReturn's public setter (its getter raises it, as a failed job's result)
    job.error = str(error)
    if job.config is not None:
        ret.cfg = job.config
        ret.hydra_cfg = job.config
    return ret


def _run_job_here(
    hydra_context: HydraContext,
    task_function: TaskFunction,
    config: DictConfig,
    singleton_state: dict[Any, Any],
    cwd: str,
    reserved_prefix: str,
    placement: list[dict[str, Any]],
) -> tuple[JobReturn, str | None]:
    """The body of a job's Ray task: an ordinary Hydra job in this worker process (run_job, as every launcher).
    Returns its JobReturn and, for a failed job, the failure as text."""
    from rlhf.launch.reservation import RESERVED_ENV
    from rlhf.launch.sweep import JobFailed

    os.chdir(cwd)  # relative paths (sweep folder, mlflow.db, data) mean what they meant to the launcher
    os.environ[RESERVED_ENV] = reserved_prefix
    # The job runs in the placement groups reserved for it on this cluster, never in this task's own process.
    if OmegaConf.select(config, "launch") is not None:
        config.launch.executor = "ray"
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(config)
    job_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / PLACEMENT_FILE).write_text(json.dumps({"reserved": placement}, indent=2))
    raised: list[Exception] = []

    @functools.wraps(task_function)  # Hydra's callbacks see the user's task function
    def task(cfg: DictConfig) -> Any:
        # run_job stores what the task raises in the JobReturn, which hands it back only by raising it again (and
        # printing a line): kept here as it passes.
        try:
            return task_function(cfg)
        except Exception as e:
            raised.append(e)
            raise

    ret = run_job(
        hydra_context=hydra_context,
        task_function=task,
        config=config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    if ret.status != JobStatus.FAILED:
        return ret, None
    err = raised[-1]
    if not isinstance(err, JobFailed):
        # Any exception travels back as text: the launcher's process may not be able to unpickle it.
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        err = JobFailed(f"job {config.hydra.job.num}: {type(err).__name__}: {err}\n{text}")
        ret.return_value = err
    return ret, str(err)


class SweepRunner:
    """The launcher's work for one sweep (every batch its sweeper hands over)."""

    def __init__(
        self, options: Any, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.options = options  # RayClusterLauncherConf
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context
        self.rows: dict[int, dict[str, Any]] = {}  # summary rows of every batch this sweep launched

    # -- preparing ------------------------------------------------------------------------------------------------
    def _prepare(self, num: int, overrides: list[str]) -> _Job:
        from rlhf.cli.common import explain_compose_error
        from rlhf.launch.reservation import bundles_of
        from rlhf.launch.sweep import JobFailed
        from rlhf.planning.plan import plan
        from rlhf.spec import SpecInvalid, build, check
        from rlhf.spec.store import register

        assert self.hydra_context is not None and self.config is not None
        register()
        job = _Job(num=num, overrides=list(overrides))
        label = f"job {num} [{' '.join(filter_overrides(overrides))}]"
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = f"{cfg.hydra.job.name}_{num}"
                cfg.hydra.job.num = num
            job.config = cfg
            job.spec = build(cfg)
            check(job.spec)
            job.plan = plan(job.spec)
            job.bundles = bundles_of(job.plan)
        except SpecInvalid as e:
            job.ret = _failed(job, JobFailed(f"{label}: {e}"))
        except Exception as e:  # noqa: BLE001 - a trial that does not compose fails alone
            job.ret = _failed(job, JobFailed(f"{label}: {explain_compose_error(e)}"))
        return job

    def _connect(self, jobs: list[_Job]) -> None:
        from rlhf.launch.cluster import set_ray_env, start_or_attach
        from rlhf.spec.schema import RaySpec

        first = next((j.spec for j in jobs if j.spec is not None), None)
        ray_spec = first.ray if first is not None else RaySpec()
        address = self.options.address if self.options.address is not None else ray_spec.address
        need = max((int(sum(b.get("CPU", 0.0) for b in j.bundles)) for j in jobs), default=1)
        gpus = max((int(sum(b.get("GPU", 0.0) for b in j.bundles)) for j in jobs), default=0)
        ray_spec = RaySpec(
            address=address,
            num_cpus=self.options.num_cpus or ray_spec.num_cpus,
            object_store_gb=ray_spec.object_store_gb,
            runtime_env=dict(ray_spec.runtime_env),
            worker_niceness=ray_spec.worker_niceness,
        )
        set_ray_env(ray_spec)
        start_or_attach(ray_spec, num_cpus=need, num_gpus=gpus or None)

    def _refuse_never_fitting(self, jobs: list[_Job]) -> None:
        from rlhf.launch.reservation import fits_on, node_resources

        nodes = node_resources()
        never = [j for j in jobs if j.plan is not None and not fits_on(j.bundles, nodes)]
        if not never:
            return
        sizes = "; ".join(f"node {i}: {n}" for i, n in enumerate(nodes))
        lines = [f"{len(never)} job(s) can never fit this Ray cluster ({sizes}); none was started:"]
        for j in never:
            lines.append(f"  job {j.num} [{' '.join(filter_overrides(j.overrides))}]: needs {_counted(j.bundles)}")
        lines.append("Give the cluster more nodes or resources, or lower the jobs' hardware.devices_per_node.")
        raise NeverFits("\n".join(lines))

    # -- launching ------------------------------------------------------------------------------------------------
    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs = [self._prepare(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        for j in jobs:
            j.queued_at = time.time()
        self._connect(jobs)  # before ray is imported here: a private cluster stays on 127.0.0.1
        import ray

        self._refuse_never_fitting(jobs)
        limit = self.options.max_concurrent
        log.info(
            "Ray cluster launcher: %d job(s), at most %s at once, sweep folder %s",
            len(jobs),
            limit or "as many as fit",
            sweep_dir,
        )
        for j in jobs:
            log.info("\t#%d : %s", j.num, " ".join(filter_overrides(j.overrides)))
        runner = ray.remote(num_cpus=0, max_calls=1)(_run_job_here)
        here = ray.get_runtime_context().get_node_id()
        state = Singleton.get_state()
        queue = [j for j in jobs if j.ret is None]
        running: dict[Any, _Job] = {}
        pending: _Job | None = None
        prefix = f"rlhf-sweep-{os.getpid()}-{int(time.time())}"
        while queue or pending is not None or running:
            if pending is None and queue and (limit is None or len(running) < limit):
                pending = queue.pop(0)
                self._reserve(pending, prefix)
            watched = list(running) + (list(pending.waiting) if pending is not None else [])
            done, _ = ray.wait(watched, num_returns=1, timeout=self.options.poll_s) if watched else ([], [])
            for ref in done:
                if ref in running:
                    self._collect(running.pop(ref), ref)
                elif pending is not None:
                    pending.waiting.remove(ref)
            if pending is not None and not pending.waiting:
                running[self._start(pending, runner, here, state, prefix)] = pending
                pending = None
            elif pending is not None and self._waited_too_long(pending):
                self._give_up(pending)
                pending = None
        returns = [j.ret for j in jobs]
        self._summarize(jobs, sweep_dir)
        return returns  # type: ignore[return-value]

    def _reserve(self, job: _Job, prefix: str) -> None:
        from rlhf.launch.reservation import reserve

        job.reserved_at = time.time()
        job.pgs = reserve(job.plan, f"{prefix}-{job.num}")
        job.waiting = [pg.ready() for pg in job.pgs]
        log.info("job %d: waiting for %s", job.num, _counted(job.bundles))

    def _start(self, job: _Job, runner: Any, node_id: str, state: dict[Any, Any], prefix: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rlhf.launch.reservation import describe

        job.placement = describe(job.pgs)
        job.started_at = time.time()
        log.info("job %d: starting after %.1f s in the queue", job.num, job.started_at - job.queued_at)
        return runner.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)).remote(
            self.hydra_context,
            self.task_function,
            job.config,
            state,
            os.getcwd(),
            f"{prefix}-{job.num}",
            job.placement,
        )

    def _collect(self, job: _Job, ref: Any) -> None:
        import ray

        from rlhf.launch.reservation import release
        from rlhf.launch.sweep import JobFailed

        job.finished_at = time.time()
        try:
            job.ret, job.error = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - the job's process died (OOM, killed): that job fails alone
            job.ret = _failed(job, JobFailed(f"job {job.num}: its Ray task failed: {e}"))
        release(job.pgs)
        status = job.ret.status.name.lower()
        log.info("job %d: %s after %.1f s", job.num, status, job.finished_at - (job.started_at or job.finished_at))

    def _waited_too_long(self, job: _Job) -> bool:
        t = self.options.queue_timeout_s
        return t is not None and time.time() - job.reserved_at > t

    def _give_up(self, job: _Job) -> None:
        from rlhf.launch.reservation import release
        from rlhf.launch.sweep import JobFailed

        release(job.pgs)
        waited = time.time() - job.reserved_at
        job.ret = _failed(
            job,
            JobFailed(
                f"job {job.num}: waited {waited:.0f} s (hydra.launcher.queue_timeout_s) for {_counted(job.bundles)}"
            ),
        )

    # -- the summary ----------------------------------------------------------------------------------------------
    def _summarize(self, jobs: list[_Job], sweep_dir: Path) -> None:
        from rlhf.launch.sweep import SUMMARY_FILE, read_record, summary_table

        for j in jobs:
            record = read_record(j.job_dir) if j.job_dir is not None else None
            ret = j.ret
            failed = ret is None or ret.status != JobStatus.COMPLETED
            error = j.error if failed else None
            objective = ret.return_value if not failed and ret is not None else None
            wall = (j.finished_at - j.started_at) if j.started_at and j.finished_at else None
            self.rows[j.num] = {
                "num": j.num,
                "overrides": filter_overrides(j.overrides),
                "status": "failed" if failed else "completed",
                "seconds": round(wall, 3) if wall is not None else None,
                "queued_seconds": round(j.started_at - j.queued_at, 3) if j.started_at else None,
                "objective": objective,
                "objective_key": record.objective_key if record else None,
                "error": error,
                "run_dir": str(j.job_dir) if j.job_dir is not None else None,
                "started": j.started_at,
                "finished": j.finished_at,
                "placement": j.placement,
                "plan_bundles": j.bundles,
            }
        rows = [self.rows[k] for k in sorted(self.rows)]
        (sweep_dir / SUMMARY_FILE).write_text(json.dumps({"sweep": str(sweep_dir), "jobs": rows}, indent=2))
        done = sum(r["status"] == "completed" for r in rows)
        log.info(
            "sweep summary (%d of %d completed; %s):\n%s",
            done,
            len(rows),
            sweep_dir / SUMMARY_FILE,
            summary_table(rows),
        )


def _counted(bundles: list[dict[str, float]]) -> str:
    """``2 x {'CPU': 2.0}`` style: the bundles of a job, grouped."""
    counts: dict[str, int] = {}
    for b in bundles:
        key = json.dumps(b, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} bundle(s) of {k}" for k, n in counts.items())
