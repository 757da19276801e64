"""MLflow: a local sqlite store by default (``sqlite:///<cwd>/mlflow.db``; ``mlflow ui --backend-store-uri`` with
the same URI shows the runs), any tracking URI by ``logging.tracking_uri``. Written through ``MlflowClient`` (no
process-wide active run, so the jobs of a sweep that share one process never see each other's run). A sweep's jobs
are children of one parent run named after the sweep (MLflow's ``mlflow.parentRunId`` tag)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoggingSpec
from rlhf.tracking.protocol import RunInfo, Status

MAX_PARAM_CHARS = 6000  # MLflow's limit on one parameter value
PARAMS_PER_BATCH = 100  # MLflow's limit on params in one log_batch
METRICS_PER_BATCH = 1000
PARENT_TAG = "rlhf.sweep_parent"  # on the parent run of a sweep: the sweep's id
PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's own tag for a nested run's parent (mlflow.utils.mlflow_tags)
END_REASON_TAG = "rlhf.end_reason"  # on a run ended by end_stale: why (its driver died), and who noticed


def default_tracking_uri(cwd: Path | None = None) -> str:
    """sqlite in the directory the job started from (MLflow 3 refuses a file store without an opt-in)."""
    return f"sqlite:///{(cwd or Path.cwd()).resolve() / 'mlflow.db'}"


def tracking_uri(logging: LoggingSpec) -> str:
    return logging.tracking_uri or default_tracking_uri()


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    _seed_new_sqlite_store(uri)
    return MlflowClient(tracking_uri=uri)


def _seed_new_sqlite_store(uri: str) -> None:
    """A new local sqlite store starts as a copy of an empty one made once per MLflow version: creating the tables
    runs MLflow's whole schema migration, about 3 s of every fresh run's start-up on 2 cores (the copy: 10 ms).
    The copy holds MLflow's tables at its version's schema and nothing else; MLflow adds its ``Default`` experiment
    on first use as it does in a store it made."""
    import os
    import shutil

    import mlflow

    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return
    target = Path(uri[len(prefix) :])
    if target.exists() or not target.parent.is_dir():
        return
    from rlhf.spec.paths import cache_dir

    template = cache_dir() / "mlflow" / f"empty-{mlflow.__version__}.db"
    if not template.is_file():
        template.parent.mkdir(parents=True, exist_ok=True)
        making = template.with_name(f"{template.name}.{os.getpid()}.tmp")
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=prefix + str(making)).search_experiments()  # the store is made on first use
        # Its Default experiment points at the maker's ./mlruns; without that row MLflow writes its own Default, with
        # the artifact location of the store's first user, when it opens the copy (SqlAlchemyStore.__init__).
        import sqlite3

        with sqlite3.connect(making) as db:
            db.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(making, template)  # atomic: concurrent first runs each make one, the last rename wins
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(template, partial)
    try:
        os.link(partial, target)  # fails if another job made the store meanwhile: theirs is kept
    except FileExistsError:
        pass
    finally:
        partial.unlink(missing_ok=True)


def _experiment_id(client: Any, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another job created it first (MlflowException: already exists)
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _parent_of(client: Any, experiment_id: str, group: str) -> str | None:
    quoted = group.replace("'", "\\'")
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{quoted}'", max_results=1)
    return runs[0].info.run_id if runs else None


class MlflowTracker:
    """One MLflow run per job; continued by run id on resume (same tracking URI)."""

    def __init__(self) -> None:
        self.client: Any = None
        self.uri = ""
        self.run_id = ""
        self.experiment_id = ""
        self._last = -1  # MLflow cannot be asked cheaply for a run's highest step: kept in the record
        self._ended = False

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        self.uri = tracking_uri(run.spec.logging)
        self.client = _client(self.uri)
        self.experiment_id = _experiment_id(self.client, run.spec.logging.experiment)
        if record and record.get("tracking_uri") == self.uri and record.get("run_id"):
            if self._continue(str(record["run_id"])):
                self._last = max(int(record.get("last_step", -1)), self._held_last_step())
                return True
        tags = dict(run.tags)
        if run.group:
            parent = _parent_of(self.client, self.experiment_id, run.group)
            if parent:  # made by the sweep's own process (open_group); absent when sweep.id was set by hand
                tags[PARENT_RUN_ID] = parent
        made = self.client.create_run(self.experiment_id, tags=tags, run_name=run.name)
        self.run_id = made.info.run_id
        return False

    def _continue(self, run_id: str) -> bool:
        try:
            found = self.client.get_run(run_id)
        except Exception:  # deleted, or another store: a new run
            return False
        if found.info.lifecycle_stage != "active":
            return False
        self.run_id = run_id
        self.client.update_run(run_id, status="RUNNING")
        return True

    def _held_last_step(self) -> int:
        """The highest step the run holds for a metric every logged step has: a process killed between logging a
        step and saving its record leaves the record one step behind what MLflow holds."""
        keys = sorted(self.client.get_run(self.run_id).data.metrics)
        key = next((k for k in keys if k.startswith("train/") and "/timing/" not in k), keys[0] if keys else None)
        if key is None:
            return -1
        return max((int(m.step) for m in self.client.get_metric_history(self.run_id, key)), default=-1)

    def record(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.uri, "last_step": self._last}

    def last_step(self) -> int:
        return self._last

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + PARAMS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + METRICS_PER_BATCH])  # synchronous: on disk
        self._last = max(self._last, step)

    def log_artifacts(self, paths: list[Path]) -> None:
        for p in paths:
            if Path(p).exists():
                self.client.log_artifact(self.run_id, str(p))

    def location(self) -> str:
        return f"run {self.run_id} in {self.uri}  (mlflow ui --backend-store-uri {self.uri})"

    def finish(self, status: Status) -> None:
        if self.run_id and not self._ended:
            self.client.set_terminated(self.run_id, status)
            self._ended = True

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        uri, run_id = record.get("tracking_uri"), record.get("run_id")
        if not uri or not run_id:
            return False
        client = _client(str(uri))
        try:
            run = client.get_run(str(run_id))
        except Exception:  # deleted, or the store is gone: nothing to end
            return False
        if run.info.status != "RUNNING":
            return False
        client.set_tag(run.info.run_id, END_REASON_TAG, reason)
        client.set_terminated(run.info.run_id, status)
        return True

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        # Once, before any job: jobs that start together would race to create the same sqlite database (MLflow's
        # schema migration fails for all but one) and the same experiment.
        client = _client(tracking_uri(logging))
        exp = _experiment_id(client, logging.experiment)
        if _parent_of(client, exp, group) is None:
            client.create_run(exp, tags={PARENT_TAG: group, "rlhf.sweep": group}, run_name=f"sweep {group}")

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        client = _client(tracking_uri(logging))
        exp = client.get_experiment_by_name(logging.experiment)
        parent = _parent_of(client, exp.experiment_id, group) if exp is not None else None
        if parent:
            client.set_terminated(parent, status)
