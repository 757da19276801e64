"""One job from a validated spec and its plan: the pipeline of the algorithm's family on the plan's Ray placement.

The launcher hands ``realize`` to the pipeline, so pipelines never import the launch layer above them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.launch.cluster import set_ray_env
from rlhf.launch.plan import Plan
from rlhf.launch.realize import realize
from rlhf.spec.schema import ExperimentSpec


def run(spec: ExperimentSpec, plan: Plan, run_dir: Path) -> dict[str, Any]:
    """Train as ``spec`` says; returns the pipeline's summary (model_dir, steps, final metrics, MLflow run)."""
    set_ray_env(spec.ray)  # before the pipeline's imports bring in ray
    from rlhf.pipelines import run as run_pipeline

    return run_pipeline(spec, plan, Path(run_dir), realize)
