"""The one object a pipeline logs through: ``<run dir>/metrics.jsonl`` (always) and every tracker of
``logging.trackers`` (rlhf/tracking/registry.py), each driven through the Tracker protocol."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rlhf.spec.schema import ExperimentSpec
from rlhf.tracking import registry
from rlhf.tracking.protocol import RunInfo, Status, Tracker

METRICS_FILE = "metrics.jsonl"
TRACKING_FILE = "tracking.json"


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys -> string values, for trackers' params (``trainer.lr`` -> ``"0.001"``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: "{}"}
    return {prefix[:-1]: str(obj)}


def run_info(spec: ExperimentSpec, run_dir: Path) -> RunInfo:
    """What every tracker is told about the job (its name, tags and sweep group), from the spec."""
    name = spec.logging.run_name or f"{spec.recipe or spec.algorithm.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    tags = {"rlhf.algorithm": spec.algorithm.name, "rlhf.recipe": spec.recipe, "rlhf.run_dir": str(run_dir)}
    if spec.sweep.id:
        tags["rlhf.sweep"] = spec.sweep.id  # every job of a sweep (MLflow: filter with tags.`rlhf.sweep` = '...')
    return RunInfo(spec=spec, run_dir=Path(run_dir), name=name, tags=tags, group=spec.sweep.id)


def saved_records(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The trackers' records in ``run_dir/tracking.json`` (the last attempt's, updated at every step)."""
    f = Path(run_dir) / TRACKING_FILE
    if not f.is_file():
        return {}
    return dict(json.loads(f.read_text()).get("trackers") or {})


class Tracking:
    """Per-step metrics to ``run_dir/metrics.jsonl`` and to every tracker. ``rewind(step)`` drops what a killed
    run logged after its last checkpoint, so a resumed job's metrics.jsonl reads like an uninterrupted one. A
    tracker store cannot forget points, so a step a tracker already holds (logged before a crash or a restart,
    redone after it) is not sent to it again (``Tracker.last_step``)."""

    def __init__(
        self,
        spec: ExperimentSpec,
        run_dir: Path,
        *,
        records: dict[str, dict[str, Any]] | None = None,
        params: dict[str, str] | None = None,
    ) -> None:
        """``records``: the trackers' records kept in the checkpoint being resumed; this folder's tracking.json,
        when it holds one for a tracker, is newer and wins. ``params``: kept beside the resolved config on a new
        run (the steps the run trains and why)."""
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.trackers: dict[str, Tracker] = {}
        info = run_info(spec, self.run_dir)
        earlier = {**(records or {}), **saved_records(self.run_dir)}
        try:
            for name in spec.logging.active_trackers:
                tracker = registry.create(name)
                self.trackers[name] = tracker  # before start: finish() ends whatever started
                if not tracker.start(info, earlier.get(name)):
                    tracker.log_params({**flatten(spec), **(params or {})})
        except BaseException:
            self.finish("FAILED")
            raise
        self._save_records()

    def records(self) -> dict[str, dict[str, Any]]:
        """Each tracker's record (what resumes its run), for tracking.json and the checkpoint's driver state."""
        return {name: t.record() for name, t in self.trackers.items()}

    def locations(self) -> dict[str, str]:
        """Each tracker's one line for the end-of-run summary."""
        return {name: t.location() for name, t in self.trackers.items()}

    def _save_records(self) -> None:
        tmp = self.run_dir / f".{TRACKING_FILE}.tmp"
        tmp.write_text(json.dumps({"trackers": self.records()}))
        tmp.replace(self.run_dir / TRACKING_FILE)  # a kill mid-write leaves the previous file whole

    def previous_steps(self) -> int:
        """Steps a previous attempt in this run folder logged (metrics.jsonl rows with a step above 0)."""
        return len({r.get("step") for r in read_metrics(self.run_dir) if r.get("step", 0) > 0})

    def log_params(self, params: dict[str, str]) -> None:
        """Params beside the config's, to every tracker (a value a tracker already holds for this run, logged again
        on a resume, must stay the same: MLflow refuses a changed one)."""
        for t in self.trackers.values():
            t.log_params(params)

    def log_artifacts(self, paths: list[Path]) -> None:
        for t in self.trackers.values():
            t.log_artifacts(paths)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self._send(row)

    def _send(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        due = step % max(self.spec.logging.log_every, 1) == 0 or any(k.startswith("eval/") for k in row)
        waiting = [t for t in self.trackers.values() if step > t.last_step()]
        if not due or not waiting:
            return
        values = {k: v for k, v in row.items() if k != "step"}
        for t in waiting:
            t.log_metrics(values, step)
        self._save_records()

    def rewind(self, step: int) -> None:
        """Forget metrics.jsonl rows logged after ``step`` (a resumed run redoes those steps), and send the rows
        kept to every tracker that holds fewer (a killed process loses what a tracker had not written out yet:
        W&B's core process writes behind the training loop)."""
        if not self.metrics_path.is_file():
            return
        rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if r.get("step", 0) <= step]
        self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in keep))
        for row in keep:
            self._send(row)

    def finish(self, status: Status | bool = "FINISHED") -> None:
        """End every tracker's run: FINISHED, FAILED or KILLED (an interrupted run); a bool means FINISHED/FAILED.
        Every tracker is ended even when one of them fails to (the first error is raised after)."""
        if isinstance(status, bool):
            status = "FINISHED" if status else "FAILED"
        error: BaseException | None = None
        for t in self.trackers.values():
            try:
                t.finish(status)
            except Exception as e:
                error = error or e
        if error is not None:
            raise error


def end_stale_runs(run_dir: Path, status: Status, reason: str) -> list[str]:
    """End with ``status``, in every tracker of ``run_dir/tracking.json`` that keeps a status, the run a process that
    died left open (``Tracker.end_stale``); the names of the trackers whose run was ended. A tracker that cannot be
    made here (its package is gone) is skipped."""
    ended = []
    for name, record in saved_records(run_dir).items():
        if name not in registry.names() or registry.missing_package(name):
            continue
        if registry.create(name).end_stale(record, status, reason):
            ended.append(name)
    return ended


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The rows of ``run_dir/metrics.jsonl`` (for tests and reports)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
