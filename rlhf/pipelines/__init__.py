"""The training loops: ``run(spec, plan, run_dir)`` dispatches on ``spec.algorithm.family``.

sft, rm and dpo share rlhf.pipelines.supervised; rl (every RL algorithm) lives in rlhf.pipelines.rl, and a
rollout-only run (rollout.only) in rlhf.pipelines.rollout_only, which reuses rl's data and eval.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlhf.spec.schema import ExperimentSpec


def run(
    spec: ExperimentSpec, plan: Any, run_dir: Path, realize: Callable[[ExperimentSpec, Any], Any]
) -> dict[str, Any]:
    """Run the pipeline of ``spec.algorithm.family``; returns a summary (model_dir, steps, final metrics, MLflow
    run id, ...). ``realize(spec, plan)`` starts the Ray placement: the launcher passes rlhf.launch.realize.realize
    (rlhf.launch.job.run does), so pipelines never import the layer above them."""
    family = spec.algorithm.family
    run_dir = Path(run_dir)
    if family in ("sft", "rm", "dpo"):
        from importlib import import_module

        from rlhf.pipelines.supervised import run_supervised

        make_task = import_module(f"rlhf.pipelines.{family}").make_task
        return run_supervised(spec, plan, run_dir, make_task, realize)
    if family == "rl" and spec.rollout.only:  # rollout-only: generate, score (and record); nothing trains
        from rlhf.pipelines.rollout_only import run as run_rollout_only

        return run_rollout_only(spec, plan, run_dir, realize)
    if family == "rl":
        from rlhf.pipelines.rl import run as run_rl

        return run_rl(spec, plan, run_dir, realize)
    raise ValueError(f"algorithm.family={family!r}: must be one of sft, rm, dpo, rl")
