"""How and where the job's processes start: ``launch.*``, ``ray.*``, and ``sweep.*`` for a job of a sweep."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class LaunchSpec:
    """How the job's processes are started (rlhf.spec.executor): Ray where there is more than one process, the
    driver's own process where there is one."""

    executor: str = key(
        "auto",
        "ray: placement groups and one Ray actor per rank and engine | local: the roles of a one-process job (one "
        "rank; generation in the policy's process or one hf engine beside it) in the driver's own process, no "
        "cluster (as TRL and OpenRLHF's SFT/RM/DPO trainers run) | auto: local when the job is one process on "
        "this machine, else ray (rlhf-plan and the start-up line say which and why)",
        choices=("auto", "ray", "local"),
    )


@dataclass(frozen=True)
class RaySpec:
    """The Ray cluster a job runs on."""

    address: str = key("", 'empty: start a private local cluster; "auto" or host:port attaches to one')
    num_cpus: int | None = key(None, "local cluster only: logical CPUs (null: what the plan needs)", ge=1)
    object_store_gb: float | None = key(None, "local cluster only: object store size (null: Ray's default)", gt=0)
    runtime_env: dict[str, str] = key(factory=dict, doc="extra environment variables for every worker")
    # Ray's own default (15) lets every other busy process take the cores from the training actors (measured on a
    # loaded 2-core machine: 0.36 cores used against 0.9 at nice 0).
    worker_niceness: int = key(0, "local cluster only: nice value of Ray's worker processes", ge=0, le=19)


@dataclass(frozen=True)
class SweepSpec:
    """What a job of a sweep (rlhf-run -m) reports to its sweeper, and the sweep it belongs to."""

    objective: str = key(
        "",
        "metric a sweep job returns to its sweeper, e.g. eval_add_pass1 (its final value); "
        "empty: the best value of the best-checkpoint metric (eval.best_metric)",
    )
    direction: str = key(
        "maximize",
        "whether a larger objective is better; rlhf-run passes it to Optuna unless hydra.sweeper.direction is given",
        choices=("maximize", "minimize"),
    )
    id: str = key(
        "", "the sweep a job belongs to, grouping its jobs in every tracker; empty: set by rlhf-run -m (its folder)"
    )
