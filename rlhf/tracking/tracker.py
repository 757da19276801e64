"""The one object a pipeline logs through: metrics.jsonl (always), MLflow (when enabled), the progress bar."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from rlhf.spec.schema import ExperimentSpec
from rlhf.tracking.mlflow_logger import MlflowRun, default_tracking_uri, flatten

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TRACKING_FILE = "tracking.json"


class Tracker:
    """Per-step metrics to ``run_dir/metrics.jsonl`` and MLflow. ``rewind(step)`` drops what a killed run logged
    after its last checkpoint, so a resumed job's log reads like an uninterrupted one."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, *, run_id: str | None = None) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.mlflow: MlflowRun | None = None
        self.tracking_uri = spec.logging.tracking_uri or default_tracking_uri()
        if spec.logging.mlflow:
            run_id = run_id or self._saved_run_id()
            name = spec.logging.run_name or f"{spec.recipe or spec.algorithm.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            tags = {"rlhf.algorithm": spec.algorithm.name, "rlhf.recipe": spec.recipe, "rlhf.run_dir": str(run_dir)}
            if spec.sweep.id:
                tags["rlhf.sweep"] = spec.sweep.id  # every job of a sweep: filter with tags.`rlhf.sweep` = '...'
            self.mlflow = MlflowRun(self.tracking_uri, spec.logging.experiment, name, run_id=run_id, tags=tags)
            (self.run_dir / TRACKING_FILE).write_text(
                json.dumps({"run_id": self.mlflow.run_id, "tracking_uri": self.tracking_uri})
            )
            if run_id is None:
                self.mlflow.log_params(flatten(spec))

    @property
    def run_id(self) -> str | None:
        return self.mlflow.run_id if self.mlflow else None

    def _saved_run_id(self) -> str | None:
        f = self.run_dir / TRACKING_FILE
        if f.is_file():
            saved = json.loads(f.read_text())
            if saved.get("tracking_uri") == self.tracking_uri:
                return saved.get("run_id")
        return None

    def log_artifacts(self, paths: list[Path]) -> None:
        if self.mlflow:
            for p in paths:
                self.mlflow.log_artifact(p)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.mlflow and (step % max(self.spec.logging.log_every, 1) == 0 or any(k.startswith("eval/") for k in row)):
            self.mlflow.log_metrics(metrics, step)

    def rewind(self, step: int) -> None:
        """Forget rows logged after ``step`` (a resumed run redoes those steps)."""
        if not self.metrics_path.is_file():
            return
        rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if r.get("step", 0) <= step]
        self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in keep))

    def finish(self, ok: bool = True) -> None:
        if self.mlflow:
            self.mlflow.end("FINISHED" if ok else "FAILED")
            self.mlflow = None


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The rows of ``run_dir/metrics.jsonl`` (for tests and reports)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
