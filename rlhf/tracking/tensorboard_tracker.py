"""TensorBoard: event files written with torch's ``SummaryWriter`` (scalars stored as float64, so they equal the
other trackers' values exactly), read back with tensorboard's own event-file loader.

Where: ``<run dir>/tensorboard``; in a sweep (or with ``sweep.id`` set) ``<sweep folder>/tensorboard/<job folder>``,
so ``tensorboard --logdir <sweep folder>/tensorboard`` shows the jobs side by side; ``logging.tensorboard.dir=ROOT``
puts each run in ``ROOT/<run folder name>``. A resumed run appends a new event file to the same folder; the highest
step held is read back from the folder's event files, so a step already there is never written again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoggingSpec
from rlhf.tracking.protocol import RunInfo, Status

EVENTS_GLOB = "events.out.tfevents.*"


def event_dirs(run: RunInfo) -> tuple[Path, Path]:
    """(the root ``tensorboard --logdir`` shows, this run's event folder)."""
    chosen = run.spec.logging.tensorboard.dir
    if chosen:
        root = Path(chosen).expanduser().resolve()
    elif run.group:
        root = run.run_dir.resolve().parent / "tensorboard"
    else:
        return run.run_dir.resolve() / "tensorboard", run.run_dir.resolve() / "tensorboard"
    return root, root / run.run_dir.name


def scalar_events(folder: Path) -> Iterator[tuple[str, int, float]]:
    """``(tag, step, value)`` of every scalar in the event files of ``folder``, file by file in the order written,
    duplicates included (tensorboard's EventAccumulator would hide a repeated step; this does not). A file cut
    short by a killed process yields what it holds."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    for f in sorted(Path(folder).glob(EVENTS_GLOB)):
        try:
            for event in EventFileLoader(str(f)).Load():
                for v in event.summary.value:
                    if v.HasField("tensor"):
                        value = tensor_util.make_ndarray(v.tensor)
                        if value.ndim == 0 and value.dtype.kind == "f":
                            yield v.tag, int(event.step), float(value)
                    elif v.HasField("simple_value"):
                        yield v.tag, int(event.step), float(v.simple_value)
        except Exception:  # a truncated last record (DataLossError): what came before it stands
            continue


def _first_wall_time(path: Path) -> float:
    """When the file was begun (its first event, the version record every writer starts with): file names order
    by the second and then by pid, which says nothing about two files begun within one second."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    try:
        for event in EventFileLoader(str(path)).Load():
            return float(event.wall_time)
    except Exception:  # unreadable: by its name's second
        pass
    return float(path.name.split(".")[3]) if path.name.count(".") >= 3 else 0.0


def _tags(path: Path) -> set[str]:
    """The tags (text and scalar) one event file holds; what a killed process cut short yields what it holds."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    tags: set[str] = set()
    try:
        for event in EventFileLoader(str(path)).Load():
            tags.update(v.tag.split("/")[0] for v in event.summary.value)
    except Exception:  # a truncated last record (DataLossError)
        pass
    return tags


class TensorBoardTracker:
    def __init__(self) -> None:
        self.writer: Any = None
        self.root = Path()
        self.folder = Path()
        self._last = -1

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch's writer imports the tensorboard package
            from rlhf.tracking.protocol import TrackerUnavailable

            raise TrackerUnavailable(f"the tensorboard tracker needs: pip install 'rlhf[tensorboard]' ({e})") from e
        self.root, self.folder = event_dirs(run)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._last = max((step for _, step, _ in scalar_events(self.folder)), default=-1)
        resumed = bool(record) and record.get("dir") == str(self.folder)
        self.writer = SummaryWriter(log_dir=str(self.folder))
        return resumed

    def record(self) -> dict[str, Any]:
        return {"dir": str(self.folder)}

    def last_step(self) -> int:
        return self._last

    def log_params(self, params: dict[str, str]) -> None:
        rows = "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in params.items())
        self.writer.add_text("config", f"| key | value |\n|---|---|\n{rows}", 0)
        self.writer.flush()

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, float(v), step, new_style=True, double_precision=True)
        self.writer.flush()  # the writer's own queue flushes every 2 minutes; a kill would lose those steps
        self._last = max(self._last, step)

    def log_artifacts(self, paths: list[Path]) -> None:
        """TensorBoard keeps no files; the config is in the ``config`` text (log_params), the rest in the run
        folder."""

    def location(self) -> str:
        return f"{self.folder}  (tensorboard --logdir {self.root})"

    def finish(self, status: Status) -> None:
        if self.writer is not None:
            self.writer.add_text("status", status, max(self._last, 0))
            self.writer.close()
            self.writer = None

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        """Each attempt writes its own event file and ends it with the ``status`` text: a newest file without one was
        left by a process that died. The status goes into one more file of the same folder."""
        folder = Path(str(record.get("dir") or ""))
        found = folder.glob(EVENTS_GLOB) if record.get("dir") and folder.is_dir() else []
        files = sorted(found, key=_first_wall_time)
        if not files or "status" in _tags(files[-1]):
            return False
        from torch.utils.tensorboard import SummaryWriter

        last = max((step for _, step, _ in scalar_events(folder)), default=0)
        writer = SummaryWriter(log_dir=str(folder))
        writer.add_text("status", status, last)
        writer.add_text("status_reason", reason, last)
        writer.close()
        return True

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        """Nothing to make: the jobs' sub-folders of one root are the group."""

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        """Nothing to close."""
