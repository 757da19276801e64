"""The files every run folder holds besides metrics and checkpoints, logged as the tracker's artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.spec.schema import ExperimentSpec


def run_artifacts(spec: ExperimentSpec, plan: Any, run_dir: Path) -> list[Path]:
    """The resolved config and the plan (the CLI writes them; a direct call gets them written here)."""
    cfg, plan_file = run_dir / "resolved_config.yaml", run_dir / "plan.json"
    if not cfg.exists():
        from omegaconf import OmegaConf

        cfg.write_text(OmegaConf.to_yaml(OmegaConf.structured(spec)))
    if not plan_file.exists() and hasattr(plan, "to_json"):
        plan_file.write_text(plan.to_json())
    return [cfg, plan_file]
