"""MLflow: a local sqlite store by default (``sqlite:///<cwd>/mlflow.db``; ``mlflow ui --backend-store-uri`` with
the same URI shows the runs), any tracking URI by ``logging.tracking_uri``."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000  # MLflow's limit on one parameter value


def default_tracking_uri(cwd: Path | None = None) -> str:
    """sqlite in the directory the job started from (MLflow 3 refuses a file store without an opt-in)."""
    return f"sqlite:///{(cwd or Path.cwd()).resolve() / 'mlflow.db'}"


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys -> string values, for MLflow params (``trainer.lr`` -> ``"0.001"``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: "{}"}
    return {prefix[:-1]: str(obj)[:MAX_PARAM_CHARS]}


class MlflowRun:
    """One MLflow run: started (or resumed by id) on construction, ended by :meth:`end`."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        run_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        import mlflow

        self._mlflow = mlflow
        self.tracking_uri = tracking_uri
        mlflow.set_tracking_uri(tracking_uri)
        exp = mlflow.set_experiment(experiment)
        self.experiment_id = exp.experiment_id
        if run_id is not None:
            self.run = mlflow.start_run(run_id=run_id)
        else:
            self.run = mlflow.start_run(run_name=run_name, tags=tags or {})
        self.run_id = self.run.info.run_id

    def log_params(self, params: dict[str, str]) -> None:
        items = list(params.items())
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self._mlflow.log_params(dict(items[i : i + 100]))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        if clean:
            self._mlflow.log_metrics(clean, step=step)

    def log_artifact(self, path: Path) -> None:
        if Path(path).exists():
            self._mlflow.log_artifact(str(path))

    def end(self, status: str = "FINISHED") -> None:
        self._mlflow.end_run(status=status)
