"""One job from a validated spec and its plan: the pipeline of the algorithm's family on the executor the plan
chose (``launch.executor``: Ray's placement groups, or the driver's own process for a one-process job).

The launcher hands ``realize`` to the pipeline, so pipelines never import the launch layer above them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlhf.launch.cluster import set_ray_env
from rlhf.planning.plan import Plan
from rlhf.spec.schema import ExperimentSpec


def realizer(executor: str) -> Callable[[ExperimentSpec, Plan], Any]:
    """The ``realize`` of an executor: ``local`` (rlhf.launch.local) or ``ray`` (rlhf.launch.realize)."""
    if executor == "local":
        from rlhf.launch.local import realize as local_realize

        return local_realize
    from rlhf.launch.realize import realize as ray_realize

    return ray_realize


def run(spec: ExperimentSpec, plan: Plan, run_dir: Path) -> dict[str, Any]:
    """Train as ``spec`` says; returns the pipeline's summary (model_dir, steps, final metrics, MLflow run)."""
    if plan.executor != "local":
        set_ray_env(spec.ray)  # before the pipeline's imports bring in ray
    from rlhf.pipelines import run as run_pipeline

    return run_pipeline(spec, plan, Path(run_dir), realizer(plan.executor))
