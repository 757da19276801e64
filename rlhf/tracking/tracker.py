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
    after its last checkpoint, so a resumed job's log reads like an uninterrupted one. MLflow cannot delete metric
    points, so a step MLflow already holds (logged before a crash, redone after the resume) is not sent again: the
    highest step sent is kept in tracking.json."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, *, run_id: str | None = None) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.mlflow: MlflowRun | None = None
        self.mlflow_step = -1  # the highest step MLflow holds for this run
        self.tracking_uri = spec.logging.tracking_uri or default_tracking_uri()
        if spec.logging.mlflow:
            run_id = run_id or self._saved_run_id()
            name = spec.logging.run_name or f"{spec.recipe or spec.algorithm.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            tags = {"rlhf.algorithm": spec.algorithm.name, "rlhf.recipe": spec.recipe, "rlhf.run_dir": str(run_dir)}
            if spec.sweep.id:
                tags["rlhf.sweep"] = spec.sweep.id  # every job of a sweep: filter with tags.`rlhf.sweep` = '...'
            self.mlflow = MlflowRun(self.tracking_uri, spec.logging.experiment, name, run_id=run_id, tags=tags)
            saved = self._saved()
            self.mlflow_step = int(saved.get("mlflow_step", -1)) if saved.get("run_id") == self.mlflow.run_id else -1
            self._save_tracking()
            if run_id is None:
                self.mlflow.log_params(flatten(spec))

    @property
    def run_id(self) -> str | None:
        return self.mlflow.run_id if self.mlflow else None

    def _saved(self) -> dict[str, Any]:
        f = self.run_dir / TRACKING_FILE
        return json.loads(f.read_text()) if f.is_file() else {}

    def _saved_run_id(self) -> str | None:
        saved = self._saved()
        return saved.get("run_id") if saved.get("tracking_uri") == self.tracking_uri else None

    def _save_tracking(self) -> None:
        doc = {"run_id": self.mlflow.run_id, "tracking_uri": self.tracking_uri, "mlflow_step": self.mlflow_step}
        (self.run_dir / TRACKING_FILE).write_text(json.dumps(doc))

    def previous_steps(self) -> int:
        """Steps a previous attempt in this run folder logged (metrics.jsonl rows with a step above 0)."""
        return len({r.get("step") for r in read_metrics(self.run_dir) if r.get("step", 0) > 0})

    def log_params(self, params: dict[str, str]) -> None:
        """Params beside the config's (a value MLflow already holds for this run must stay the same)."""
        if self.mlflow:
            self.mlflow.log_params(params)

    def log_artifacts(self, paths: list[Path]) -> None:
        if self.mlflow:
            for p in paths:
                self.mlflow.log_artifact(p)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        due = step % max(self.spec.logging.log_every, 1) == 0 or any(k.startswith("eval/") for k in row)
        if self.mlflow and due and step > self.mlflow_step:
            self.mlflow.log_metrics(metrics, step)
        if self.mlflow and step > self.mlflow_step:
            self.mlflow_step = step
            self._save_tracking()

    def rewind(self, step: int) -> None:
        """Forget rows logged after ``step`` (a resumed run redoes those steps)."""
        if not self.metrics_path.is_file():
            return
        rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if r.get("step", 0) <= step]
        self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in keep))

    def finish(self, status: str | bool = "FINISHED") -> None:
        """End the MLflow run: FINISHED, FAILED or KILLED (an interrupted run); a bool means FINISHED/FAILED."""
        if isinstance(status, bool):
            status = "FINISHED" if status else "FAILED"
        if self.mlflow:
            self.mlflow.end(status)
            self.mlflow = None


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The rows of ``run_dir/metrics.jsonl`` (for tests and reports)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
