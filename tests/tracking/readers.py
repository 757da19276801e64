"""Reading back what each tracker's own store holds for one run, from the store itself (MLflow's client,
TensorBoard's event files, W&B's run files, the captured console), with every point kept so a repeated step shows.

A tracker added to the registry needs a reader here (tests/tracking/test_conformance.py says so when one is
missing)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf.tracking.wandb_tracker import EXIT_CODES


@dataclass
class Held:
    points: list[tuple[int, str, float]]  # (step, metric, value) as stored, repeats included
    params: dict[str, str] = field(default_factory=dict)
    status: str | None = None  # FINISHED | FAILED | KILLED; None where the tracker keeps none
    group: str = ""  # what ties the run to its sweep ("" none)
    files: set[str] = field(default_factory=set)  # names of the artifacts kept

    def steps(self) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for step, name, value in self.points:
            out.setdefault(step, {})[name] = value
        return out

    def repeated(self) -> list[tuple[int, str]]:
        return [k for k, n in Counter((s, m) for s, m, _ in self.points).items() if n > 1]


@dataclass(frozen=True)
class Reader:
    read: Callable[[dict[str, Any], Path, str], Held]  # (the tracker's record, run dir, captured stderr)
    persistent: bool = True  # False: holds nothing once its process ended (the console)


def read_mlflow(record: dict[str, Any], run_dir: Path, err: str) -> Held:
    from mlflow import MlflowClient

    from rlhf.tracking.mlflow_tracker import PARENT_RUN_ID, PARENT_TAG

    client = MlflowClient(tracking_uri=record["tracking_uri"])
    run = client.get_run(record["run_id"])
    points = [
        (m.step, key, m.value) for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)
    ]
    parent = run.data.tags.get(PARENT_RUN_ID)
    group = client.get_run(parent).data.tags.get(PARENT_TAG, "") if parent else ""
    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    return Held(points, dict(run.data.params), run.info.status, group, files)


def _tensorboard_texts(folder: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out: dict[str, list[str]] = {}
    for f in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(f)).Load():
            for v in event.summary.value:
                if v.HasField("tensor") and v.tensor.string_val:
                    text = tensor_util.make_ndarray(v.tensor).reshape(-1)[0]
                    out.setdefault(v.tag.split("/")[0], []).append(text.decode())
    return out


def read_tensorboard(record: dict[str, Any], run_dir: Path, err: str) -> Held:
    from rlhf.tracking.tensorboard_tracker import scalar_events

    folder = Path(record["dir"])
    points = [(step, tag, value) for tag, step, value in scalar_events(folder)]
    texts = _tensorboard_texts(folder)
    params = {}
    for table in texts.get("config", []):
        for line in table.splitlines()[2:]:
            key, value = (c.strip() for c in line.strip("|").split("|", 1))
            params[key] = value
    status = texts["status"][-1] if texts.get("status") else None
    group = str(folder.parent) if folder.name != "tensorboard" else ""  # a sweep: the jobs' common root
    return Held(points, params, status, group)


def read_wandb(record: dict[str, Any], run_dir: Path, err: str) -> Held:
    from rlhf.tracking.wandb_files import run_files

    attempts = run_files(run_dir / "wandb", record["id"])
    points = [
        (int(row["_step"]), k, float(v))
        for f in attempts
        for row in f.history
        for k, v in row.items()
        if not k.startswith("_")
    ]
    params = {k: str(v) for f in attempts for k, v in f.config.items() if not k.startswith("_")}
    codes = {code: status for status, code in EXIT_CODES.items()}
    last = attempts[-1].exit_code if attempts else None
    files = {p.name for f in attempts for p in (f.path.parent / "files").iterdir()}
    return Held(points, params, codes.get(last) if last is not None else None, attempts[0].group, files)


LINE = re.compile(r"^step (\d+): (.*)$")


def read_console(record: dict[str, Any], run_dir: Path, err: str) -> Held:
    points = []
    for line in err.splitlines():
        m = LINE.match(line.strip())
        if m:
            for pair in m.group(2).split(", "):
                key, _, value = pair.partition("=")
                points.append((int(m.group(1)), key, float(value)))
    return Held(points)


READERS: dict[str, Reader] = {
    "mlflow": Reader(read_mlflow),
    "tensorboard": Reader(read_tensorboard),
    "wandb": Reader(read_wandb),
    "console": Reader(read_console, persistent=False),
}


def records(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The trackers' records a run left in its tracking.json."""
    return json.loads((Path(run_dir) / "tracking.json").read_text())["trackers"]
