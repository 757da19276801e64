"""Checkpoint folders that survive a crash at any moment.

Layout under ``checkpoint.dir``::

    step00000010/            one complete checkpoint: DeepSpeed's files (ds/), per-rank RNG, driver_state.json
    step00000020/
    latest                   the name of the newest complete checkpoint, replaced atomically, written last
    .tmp-step00000030/       a checkpoint being written (ignored and cleared on the next save)

A save writes into a ``.tmp-`` folder (rlhf.atomic_save), renames it into place, then replaces ``latest``; rotation
deletes the oldest only after that. A crash before the rename leaves ``latest`` naming the previous complete
checkpoint. Before writing, the free space is checked against the last checkpoint's size plus a margin; a save that
does not fit, or hits a full disk at any write, raises :class:`~rlhf.atomic_save.DiskFull` naming the folder, the
bytes needed and free and the last good checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rlhf import atomic_save
from rlhf.errors import UserError

LATEST = "latest"
DRIVER_STATE = "driver_state.json"
_STEP_DIR = re.compile(r"^step(\d+)$")


class CheckpointError(UserError):
    pass


def step_dir_name(step: int) -> str:
    return f"step{step:08d}"


class CheckpointManager:
    def __init__(self, root: Path, max_keep: int = 3) -> None:
        self.root = Path(root)
        self.max_keep = max_keep

    # -- reading -------------------------------------------------------------------------------------------------
    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints (renamed into place, with a driver state), oldest first."""
        if not self.root.is_dir():
            return []
        out = []
        for p in self.root.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and (p / DRIVER_STATE).is_file():
                out.append((int(m.group(1)), p))
        return sorted(out)

    def latest(self) -> Path | None:
        """The checkpoint ``latest`` names; the newest complete one if the pointer is missing or stale."""
        pointer = self.root / LATEST
        if pointer.is_file():
            p = self.root / pointer.read_text().strip()
            if (p / DRIVER_STATE).is_file():
                return p
        done = self.complete()
        return done[-1][1] if done else None

    def resolve_resume(self, resume: str) -> Path | None:
        """``checkpoint.resume``: never -> None; auto -> latest here (or None); a path -> that checkpoint (a
        checkpoint root is followed to its latest)."""
        if resume == "never":
            return None
        if resume == "auto":
            return self.latest()
        p = Path(resume).expanduser()
        if (p / DRIVER_STATE).is_file():
            return p
        found = CheckpointManager(p).latest() if p.is_dir() else None
        if found is None:
            raise CheckpointError(f"checkpoint.resume={resume!r}: no complete checkpoint there (need {DRIVER_STATE})")
        return found

    @staticmethod
    def driver_state(path: Path) -> dict[str, Any]:
        return json.loads((Path(path) / DRIVER_STATE).read_text())

    @staticmethod
    def step_of(path: Path) -> int | None:
        m = _STEP_DIR.match(Path(path).name)
        return int(m.group(1)) if m else None

    def expected_bytes(self) -> int:
        """The size of the newest complete checkpoint (the next one is about as large), or 0 before the first."""
        done = self.complete()
        return atomic_save.tree_bytes(done[-1][1]) if done else 0

    @staticmethod
    def _what(step: int) -> str:
        return f"the checkpoint of step {step}"

    # -- writing -------------------------------------------------------------------------------------------------
    def begin(self, step: int) -> Path:
        """A fresh temporary folder for the checkpoint of ``step`` (stale temporaries are removed), after checking
        that the disk has room for one more checkpoint of the last one's size plus the margin (DiskFull if not).

        Fault point ``disk.fill_before_checkpoint:N`` (tests): the N-th save then fills the disk, so that the
        ranks' writes meet a really full disk."""
        self.root.mkdir(parents=True, exist_ok=True)
        for p in self.root.glob(atomic_save.TMP_PREFIX + "*"):
            shutil.rmtree(p, ignore_errors=True)
        tmp = atomic_save.begin_dir(self.root / step_dir_name(step), self.expected_bytes() or None, self._what(step))
        from rlhf import faults

        if faults.count_hits("disk.fill_before_checkpoint"):
            atomic_save.fill_disk(self.root)
        return tmp

    def abort(self, tmp: Path, error: BaseException, step: int) -> None:
        """A save failed: remove its partial folder; a full disk becomes a DiskFull naming path and sizes."""
        atomic_save.abort_dir(tmp, error, self.expected_bytes() or None, self._what(step))

    def commit(self, tmp: Path, step: int, driver_state: dict[str, Any]) -> Path:
        """Seal ``tmp`` (written by every rank) as the checkpoint of ``step``; update ``latest``; rotate."""
        _write_atomic(tmp / DRIVER_STATE, json.dumps(driver_state, indent=1))
        final = self.root / step_dir_name(step)
        atomic_save.publish(tmp, final)  # a resumed run saving the same step again replaces it
        _write_atomic(self.root / LATEST, final.name)
        self._rotate()
        return final

    def _rotate(self) -> None:
        if self.max_keep <= 0:
            return
        done = self.complete()
        for _, p in done[: max(len(done) - self.max_keep, 0)]:
            shutil.rmtree(p, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
