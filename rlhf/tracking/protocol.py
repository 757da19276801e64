"""The tracker contract: what every backend of ``logging.trackers`` implements (mlflow, tensorboard, wandb, console).

The run lifecycle (``rlhf.pipelines.lifecycle``) talks to trackers only through :class:`Tracking`
(``rlhf.tracking.tracker``), which drives each one through this Protocol: ``start`` (a new run, or the one a saved
record names), ``log_params`` once on a new run, ``log_artifacts``, ``log_metrics`` per step, ``record`` after every
change (kept in ``<run dir>/tracking.json`` and in every checkpoint), ``finish``. A sweep's own process calls
``open_group`` before its first job starts and ``close_group`` after its last one ended. ``end_stale`` ends, on a
fresh tracker, a run whose process died without ``finish`` (the next ``rlhf-run`` in the folder or the reaper
calls it, through ``rlhf.tracking.tracker.end_stale_runs``).
tests/tracking/test_conformance.py runs every registered tracker through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from rlhf.errors import UserError
from rlhf.spec.schema import ExperimentSpec, LoggingSpec

Status = Literal["FINISHED", "FAILED", "KILLED"]
STATUSES: tuple[Status, ...] = ("FINISHED", "FAILED", "KILLED")


@dataclass(frozen=True)
class RunInfo:
    """What every tracker is told about the job it tracks."""

    spec: ExperimentSpec  # the whole config: a tracker reads its own keys (logging.<name>) from it
    run_dir: Path  # the job's output folder (metrics.jsonl, checkpoints/, model/)
    name: str  # logging.run_name, or recipe and time
    tags: dict[str, str]  # rlhf.algorithm, rlhf.recipe, rlhf.run_dir (and rlhf.sweep in a sweep)
    group: str  # the sweep the job belongs to (sweep.id); "" outside a sweep


class TrackerUnavailable(UserError):
    """The tracker's package is not installed; the message names the pip extra that installs it (validation says
    so first; this is for a spec that skipped it)."""


@runtime_checkable
class Tracker(Protocol):
    """One experiment tracker. Made with no arguments by the registry (``rlhf.tracking.registry.create``); either
    ``start`` begins a run on it, or a sweep's process calls the group methods on it. Metric names are the
    pipeline's (``train/*``, ``eval/*``, ``rollout/*``, ``timing/*``) and steps are optimizer steps (0: before
    training), identical in every tracker."""

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        """Begin tracking ``run``. ``record`` is what :meth:`record` returned in an earlier attempt of the same run
        folder (or in the checkpoint being resumed): continue that run when it still fits the config (same store,
        project, folder), else start a new one. True: an earlier run was continued and holds its parameters (they
        are not logged again); False: a new run, or a continued one whose store lost them (W&B: an attempt killed
        before its core process wrote the config), so the lifecycle logs them (into the same run).
        Raises :class:`TrackerUnavailable` when the tracker's package is missing."""
        ...

    def record(self) -> dict[str, Any]:
        """JSON-serialisable: all :meth:`start` needs to continue this run in another process (run id, store,
        folder). Read after every logged step, so it may carry what the tracker cannot ask its store for."""
        ...

    def last_step(self) -> int:
        """The highest step whose metrics this run holds (-1: none), including what an earlier, killed attempt
        left in its store: the lifecycle sends a step only when it is above this, so a resumed or restarted run
        never logs a step twice. A tracker that can read its own files back answers from them."""
        ...

    def log_params(self, params: dict[str, str]) -> None:
        """The flattened resolved config (``trainer.lr`` -> ``"0.001"``), once, on a new run."""
        ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One step's metrics (floats; NaN possible). Steps arrive increasing and above :meth:`last_step`. A
        tracker that buffers writes them out here, so a killed process loses no step it was given."""
        ...

    def log_artifacts(self, paths: list[Path]) -> None:
        """Files to keep with the run (the resolved config, the plan); a tracker without a file store may ignore
        them (they stay in the run folder)."""
        ...

    def location(self) -> str:
        """One line for the end-of-run summary: where the run is and the command that shows it."""
        ...

    def finish(self, status: Status) -> None:
        """End the run: FINISHED, FAILED, or KILLED (stopped by a signal; resumable). Idempotent."""
        ...

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        """End the run ``record`` names (what :meth:`record` returned) with ``status`` when its store still holds it
        as running: the process that tracked it died without :meth:`finish` (SIGKILL, the out-of-memory killer, a
        lost node). Called on a fresh tracker, without :meth:`start`, possibly in another process long after; keeps
        ``reason`` where the store has room for it. True: the run was open and now holds ``status``; False: it had
        ended, is gone, or this tracker keeps no status."""
        ...

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        """In a sweep's own process, before any job starts: make what groups the jobs of sweep ``group`` (the
        sweep folder, or sweep.id) and what concurrent jobs would race to create (MLflow: the store, the
        experiment and the parent run; W&B groups by name; TensorBoard by sub-folders)."""
        ...

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        """In the sweep's process, after its last job ended: close what :meth:`open_group` made."""
        ...
