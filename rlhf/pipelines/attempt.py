"""The last attempt of a run folder, in ``<run dir>/attempt.json``: the driver that runs it (pid and start time, so a
recycled pid is told apart), how it ended (RUNNING while it runs, and also after its driver died without a word;
FINISHED, FAILED or KILLED once the lifecycle ended it), the steps it trains to and where its checkpoints are.

The run lifecycle writes it when an attempt starts (after the data was read: a run refused before that never
started) and when it ends. The next ``rlhf-run`` in the folder and the reaper (rlhf.launch.reaper) read it to end,
in every tracker that keeps a status, the run a driver that died left RUNNING (:func:`end_if_dead`);
``rlhf-run --resume`` reads it to say that a finished run has nothing to resume, and a rerun of the same command to
find the interrupted one (rlhf.cli.resume).
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ATTEMPT_FILE = "attempt.json"
RUNNING, FINISHED = "RUNNING", "FINISHED"
# A driver that died without ending its attempt (SIGKILL, the out-of-memory killer, a lost node) leaves its runs
# FAILED, not KILLED: nothing says it was asked to stop, and MLflow marks a run whose process ended in error FAILED
# too. KILLED stays what the lifecycle writes when it stopped on a signal with a checkpoint. Either is resumable.
DEAD_STATUS = "FAILED"


@dataclass
class Attempt:
    status: str  # RUNNING | FINISHED | FAILED | KILLED
    pid: int  # the driver's
    started: float  # the driver's process start time (psutil's create_time)
    steps: int  # what this attempt trains to
    checkpoints: str  # the checkpoint root (absolute)
    reason: str = ""  # why it ended, when not by itself (a dead driver found later)

    def driver_alive(self) -> bool:
        """The driver is still running (the same process, not a recycled pid)."""
        import psutil

        try:
            p = psutil.Process(self.pid)
            return abs(p.create_time() - self.started) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    @property
    def dead(self) -> bool:
        """It says RUNNING but its driver is gone."""
        return self.status == RUNNING and not self.driver_alive()


def read(run_dir: Path) -> Attempt | None:
    f = Path(run_dir) / ATTEMPT_FILE
    try:
        data: dict[str, Any] = json.loads(f.read_text())
        return Attempt(**{k: data[k] for k in Attempt.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None


# The file is padded to this size (JSON allows trailing blanks) so that its end can be written over its own bytes
# when the disk is full: overwriting allocated blocks needs no new ones (see :func:`end`).
_RESERVED_BYTES = 1024


def _text(attempt: Attempt) -> str:
    text = json.dumps(asdict(attempt), indent=1)
    return text + " " * max(_RESERVED_BYTES - len(text.encode()) - 1, 0) + "\n"


def _write(run_dir: Path, attempt: Attempt) -> None:
    tmp = Path(run_dir) / f".{ATTEMPT_FILE}.tmp"
    try:
        tmp.write_text(_text(attempt))
    except OSError:
        tmp.unlink(missing_ok=True)  # nothing half-written left beside the file
        raise
    tmp.replace(Path(run_dir) / ATTEMPT_FILE)  # a kill mid-write leaves the previous file whole


def _write_in_place(run_dir: Path, attempt: Attempt) -> bool:
    """Over the file's own bytes, for a full disk: True when the record fit in the space the file holds."""
    data = json.dumps(asdict(attempt), indent=1).encode()
    f = Path(run_dir) / ATTEMPT_FILE
    try:
        size = f.stat().st_size
        if len(data) + 1 > size:
            return False
        fd = os.open(f, os.O_WRONLY)
        try:
            os.pwrite(fd, data + b" " * (size - len(data) - 1) + b"\n", 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def begin(run_dir: Path, steps: int, checkpoints: Path) -> Attempt:
    import psutil

    me = psutil.Process(os.getpid())
    attempt = Attempt(RUNNING, me.pid, me.create_time(), steps, str(Path(checkpoints).resolve()))
    _write(run_dir, attempt)
    return attempt


def end(run_dir: Path, attempt: Attempt, status: str, reason: str = "") -> None:
    """Record the attempt's end. On a full disk (a run stopped by one, or a disk filled after the final save) the
    record is written over the file's own reserved bytes instead; only if even that fails is it said in one line,
    not a traceback over the run's own message, and the next rlhf-run in the folder ends the attempt."""
    attempt.status, attempt.reason = status, reason
    try:
        _write(run_dir, attempt)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        if _write_in_place(run_dir, attempt):  # the run's state stays true on a full disk
            return
        import sys

        print(
            f"warning: no space left to record the attempt's end ({status}) in {Path(run_dir) / ATTEMPT_FILE}; the "
            "next rlhf-run in this folder ends it",
            file=sys.stderr,
        )


def end_if_dead(run_dir: Path, found_by: str) -> list[str]:
    """When the folder's last attempt died without ending (RUNNING, its driver gone): its runs in every tracker that
    keeps a status are ended FAILED, and so is the attempt. The lines to print (none when there was nothing to end).
    ``found_by``: who noticed ("the next rlhf-run", "the reaper"), kept as the reason."""
    attempt = read(run_dir)
    if attempt is None or not attempt.dead:
        return []
    from rlhf.tracking.tracker import end_stale_runs

    reason = f"its driver (pid {attempt.pid}) died without finishing; found by {found_by}"
    ended = end_stale_runs(Path(run_dir), DEAD_STATUS, reason)
    end(run_dir, attempt, DEAD_STATUS, reason)
    where = f": {', '.join(ended)} marked {DEAD_STATUS}" if ended else ""
    return [f"the previous attempt in {run_dir} ended without finishing (driver pid {attempt.pid} is gone){where}"]
