"""Checkpoint folders that survive a crash at any moment.

Layout under ``checkpoint.dir``::

    step00000010/            one complete checkpoint: DeepSpeed's files (ds/), per-rank RNG, driver_state.json
    step00000020/
    latest                   the name of the newest complete checkpoint, replaced atomically, written last
    .tmp-step00000030/       a checkpoint being written (ignored and cleared on the next save)

A save writes into a ``.tmp-`` folder, renames it into place, then replaces ``latest``; rotation deletes the oldest
only after that. A crash before the rename leaves ``latest`` naming the previous complete checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

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
        return _tree_bytes(done[-1][1]) if done else 0

    # -- writing -------------------------------------------------------------------------------------------------
    def begin(self, step: int) -> Path:
        """A fresh temporary folder for the checkpoint of ``step`` (stale temporaries are removed), after checking
        that the disk has room for one more checkpoint of the last one's size."""
        self.root.mkdir(parents=True, exist_ok=True)
        for p in self.root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
        need = self.expected_bytes()
        free = shutil.disk_usage(self.root).free
        if need and free < need * 1.05:
            raise CheckpointError(
                f"no space left on device for the checkpoint of step {step} in {self.root}: it needs "
                f"~{need / 2**20:.0f} MB, {free / 2**20:.0f} MB free; free some space or set checkpoint.dir "
                f"(the previous checkpoint {self.latest()} is intact)"
            )
        tmp = self.root / f".tmp-{step_dir_name(step)}"
        tmp.mkdir()
        return tmp

    def abort(self, tmp: Path, error: BaseException, step: int) -> None:
        """A save failed: remove its partial folder; a full disk becomes a CheckpointError naming path and sizes."""
        shutil.rmtree(tmp, ignore_errors=True)
        free = shutil.disk_usage(self.root).free if self.root.exists() else 0
        if isinstance(error, CheckpointError):
            return
        if _disk_full(error) or free < 2**20:
            raise CheckpointError(
                f"saving the checkpoint of step {step} into {tmp} failed: no space left on device "
                f"({free / 2**20:.0f} MB free; ~{self.expected_bytes() / 2**20:.0f} MB needed); the partial folder was "
                f"removed and the previous checkpoint {self.latest()} is intact"
            ) from error

    def commit(self, tmp: Path, step: int, driver_state: dict[str, Any]) -> Path:
        """Seal ``tmp`` (written by every rank) as the checkpoint of ``step``; update ``latest``; rotate."""
        _write_atomic(tmp / DRIVER_STATE, json.dumps(driver_state, indent=1))
        final = self.root / step_dir_name(step)
        if final.exists():  # a resumed run saving the same step again
            shutil.rmtree(final)
        os.rename(tmp, final)
        _write_atomic(self.root / LATEST, final.name)
        self._rotate()
        return final

    def _rotate(self) -> None:
        if self.max_keep <= 0:
            return
        done = self.complete()
        for _, p in done[: max(len(done) - self.max_keep, 0)]:
            shutil.rmtree(p, ignore_errors=True)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or anything in its chain, e.g. from a Ray worker) says the disk is full. torch's writer
    reports it as "basic_ios::clear: iostream error" or "failed writing", without errno."""
    import errno

    e: BaseException | None = error
    while e is not None:
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        text = str(e)
        if "No space left" in text or "ENOSPC" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
