"""What one job of a sweep reports: its record (``job.json`` in its output folder), its objective for the sweeper,
and the sweep's summary read back from the records.

Every launcher (Hydra's basic one, submitit, joblib, our ``ray_cluster``) runs a job as an ordinary Hydra job,
so the record is written by the job itself and the summary is the same whoever launched it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hydra.errors import CompactHydraException

from rlhf.errors import UserError
from rlhf.spec.schema import ExperimentSpec

RECORD_FILE = "job.json"
CONSOLE_FILE = "console.log"
SUMMARY_FILE = "sweep_summary.json"


class JobFailed(UserError, CompactHydraException):
    """A sweep job that failed for a reason the user can fix (invalid trial, missing objective, bad data).
    Hydra records it as the job's failure and prints the message alone (no traceback)."""


class ObjectiveMissing(UserError):
    """The metric named by ``sweep.objective`` is not among the job's final metrics."""


@dataclass
class JobRecord:
    """One job of a sweep, as the job itself saw it (times are wall-clock seconds since the epoch)."""

    num: int
    overrides: list[str]
    sweep: str
    status: str = "running"  # running | completed | failed
    started: float = field(default_factory=time.time)
    finished: float | None = None
    seconds: float | None = None
    objective: float | None = None
    objective_key: str | None = None
    error: str | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    run_dir: str = ""
    trackers: dict[str, str] = field(default_factory=dict)  # tracker -> where it keeps this job's run

    def save(self, run_dir: Path) -> None:
        self.run_dir = str(run_dir)
        tmp = run_dir / f".{RECORD_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(run_dir / RECORD_FILE)

    def finish(self, run_dir: Path, status: str, **fields: Any) -> None:
        self.status = status
        self.finished = time.time()
        self.seconds = round(self.finished - self.started, 3)
        for k, v in fields.items():
            setattr(self, k, v)
        self.save(run_dir)


def read_record(run_dir: Path) -> JobRecord | None:
    f = Path(run_dir) / RECORD_FILE
    if not f.is_file():
        return None
    return JobRecord(**json.loads(f.read_text()))


def _final_value(metrics: dict[str, float], name: str) -> tuple[str, float] | None:
    for key in (name, f"eval_{name}", f"eval/{name}"):
        if key in metrics and metrics[key] is not None:
            return key, float(metrics[key])
    return None


def objective_of(summary: dict[str, Any], spec: ExperimentSpec) -> tuple[str | None, float | None]:
    """(metric, value) a job returns to its sweeper. ``sweep.objective`` empty: the best value of the best-checkpoint
    metric (eval.best_metric), else that metric's final value; a named metric: its final value (``final_metrics``,
    with or without its ``eval_``/``eval/`` prefix). Raises ObjectiveMissing when a named metric is not there."""
    final = dict(summary.get("final_metrics") or {})
    name = spec.sweep.objective
    if not name:
        best = summary.get("best") or {}
        if best.get("key") and best.get("value") is not None:
            return str(best["key"]), float(best["value"])
        if spec.eval.best_metric not in ("auto", "none"):
            hit = _final_value(final, spec.eval.best_metric)
            return hit if hit else (None, None)
        pass1 = sorted(k for k in final if k.endswith("_pass1"))
        return (pass1[0], float(final[pass1[0]])) if pass1 else (None, None)
    hit = _final_value(final, name)
    if hit is None:
        listed = ", ".join(sorted(final)) or "none (is eval.steps 0 or the eval set empty?)"
        raise ObjectiveMissing(f"sweep.objective={name}: not among the job's final metrics; they are: {listed}")
    return hit


class _Tee:
    """A text stream writing to the console and a file alike."""

    def __init__(self, console: TextIO, file: TextIO) -> None:
        self.console, self.file = console, file

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.console.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.console.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


@contextmanager
def console_copied_to(path: Path) -> Iterator[None]:
    """What the job prints (and what Ray relays from its actors to this process) also goes to ``path``."""
    out, err = sys.stdout, sys.stderr
    with open(path, "a", buffering=1) as f:
        sys.stdout, sys.stderr = _Tee(out, f), _Tee(err, f)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err


def summary_table(rows: list[dict[str, Any]]) -> str:
    """Lines of a sweep summary: job, status, wall time, objective, overrides (and the error of a failed job)."""
    lines = [f"  {'job':>4}  {'status':<10} {'wall s':>8}  {'objective':>12}  overrides"]
    for r in rows:
        wall = f"{r['seconds']:.1f}" if r.get("seconds") is not None else "-"
        obj = f"{r['objective']:.4g}" if r.get("objective") is not None else "-"
        lines.append(f"  {r['num']:>4}  {r['status']:<10} {wall:>8}  {obj:>12}  {' '.join(r['overrides'])}")
        if r.get("error"):
            lines.append(f"        {r['error'].splitlines()[0]}")
    return "\n".join(lines)
