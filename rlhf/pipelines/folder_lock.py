"""One run per folder: a run holds an exclusive lock on ``<run dir>/.rlhf.lock`` for its whole life, so a second
run into the same folder (the same ``hydra.run.dir``, a ``--resume`` of a run still going) is refused at once,
naming the holder, instead of interleaving its steps, checkpoints and model with the first one's.

The lock is ``flock`` on an open file: the kernel drops it when the holder's process ends, however it ends, so a
SIGKILLed run never leaves a stale lock behind (W&B and MLflow lock their runs against a second writer the same
way). The file keeps the holder's pid for the message; its content is never trusted for the lock itself. Within
one process the lock is re-entrant (rlhf-run's job takes it, then the run lifecycle inside it), counted per
folder."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlhf.errors import UserError

LOCK_FILE = ".rlhf.lock"

_held: dict[Path, list[int]] = {}  # folder -> [fd, depth] held by this process
_guard = threading.Lock()


class FolderInUse(UserError):
    """Another run holds the folder."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


def _message(folder: Path, holder: str) -> str:
    return (
        f"{folder} is in use by another run ({holder}): one run per folder, or their steps, checkpoints and model "
        "would mix. Wait for it to end (its last line says how to resume), or give this run a folder of its own "
        "(hydra.run.dir=DIR, or leave it out for a new dated one)"
    )


def _try_lock(folder: Path) -> tuple[int, str | None]:
    """(fd, None) with the lock taken, or (-1, the holder) when another process holds it."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise UserError(
            f"cannot open {folder / LOCK_FILE}, the lock that keeps one run per folder: {e.strerror}; the run folder "
            "must be writable (or give the run another one: hydra.run.dir=DIR)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise
        holder = _holder(fd)
        os.close(fd)
        return -1, holder
    return fd, None


def check_free(folder: str | os.PathLike[str]) -> None:
    """Refuse at once when another process holds ``folder`` (a folder that does not exist yet is free); nothing is
    created or kept. For the CLI's first second, before it composes anything."""
    folder = Path(folder).resolve()
    if not (folder / LOCK_FILE).is_file():
        return
    with _guard:
        if folder in _held:
            return
        fd, holder = _try_lock(folder)
        if fd < 0:
            raise FolderInUse(_message(folder, holder or "another process"))
        os.close(fd)  # closing the only descriptor drops the lock


@contextmanager
def hold(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``folder`` (made if missing) for the block; :class:`FolderInUse` when another process holds it."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with _guard:
        if folder in _held:
            _held[folder][1] += 1
        else:
            fd, holder = _try_lock(folder)
            if fd < 0:
                raise FolderInUse(_message(folder, holder or "another process"))
            try:  # the pid is for the message only, written over the same bytes each time (a full disk: left out)
                os.pwrite(fd, f"{os.getpid():<15}\n".encode(), 0)
            except OSError:
                pass
            _held[folder] = [fd, 1]
    try:
        yield
    finally:
        with _guard:
            entry = _held[folder]
            entry[1] -= 1
            if entry[1] == 0:
                del _held[folder]
                os.close(entry[0])  # the lock goes with the descriptor; the file stays (a holder may reopen it)
