"""Checkpoint folders that survive a crash at any moment.

Layout under ``checkpoint.dir``::

    step00000010/            one complete checkpoint: DeepSpeed's files (ds/), per-rank RNG, driver_state.json, and
                             manifest.json (every file's size and SHA-256, written last: checkpoint_manifest)
    step00000020/
    latest                   the name of the newest complete checkpoint, replaced atomically, written last
    .tmp-step00000030/       a checkpoint being written (ignored and cleared on the next save)

A save writes into a ``.tmp-`` folder (rlhf.atomic_save), renames it into place, then replaces ``latest``; rotation
deletes the oldest only after that. A crash before the rename leaves ``latest`` naming the previous complete
checkpoint. Before writing, the free space is checked against the last checkpoint's size plus a margin; a save that
does not fit, or hits a full disk at any write, raises :class:`~rlhf.atomic_save.DiskFull` naming the folder, the
bytes needed and free and the last good checkpoint.

A resume verifies the checkpoint against its manifest before anything starts: a damaged one (a file missing,
truncated or changed, the driver state gone) is named, file by file, and the run resumes from the newest intact
checkpoint before it, saying so; a checkpoint picked by hand that is damaged is refused, naming the intact one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlhf import atomic_save
from rlhf.errors import UserError
from rlhf.run_files import checkpoint_manifest

LATEST = "latest"
DRIVER_STATE = "driver_state.json"
_STEP_DIR = re.compile(r"^step(\d+)$")
_INTACT: set[tuple[Path, int | None, bool]] = set()  # checkpoints verified in this process (folder, seal, checksums)
_SAID: set[tuple[Path, str]] = set()  # damage and fallback lines said in this process


class CheckpointError(UserError):
    pass


def print_note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def step_dir_name(step: int) -> str:
    return f"step{step:08d}"


class CheckpointManager:
    def __init__(self, root: Path, max_keep: int = 3, verify: str = "checksum") -> None:
        self.root = Path(root)
        self.max_keep = max_keep
        self.checksums = verify == "checksum"  # checkpoint.verify: checksum | size

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

    def resolve_resume(self, resume: str, say: Callable[[str], None] = print_note) -> Path | None:
        """``checkpoint.resume``: never -> None; auto -> the newest intact checkpoint here (or None); a path -> that
        checkpoint, verified (a checkpoint root is followed to its newest intact one). Damage is said through
        ``say``, file by file; a CheckpointError when nothing intact is left or a picked checkpoint is damaged."""
        if resume == "never":
            return None
        if resume == "auto":
            return self.newest_intact(say)
        p = Path(resume).expanduser()
        if not (p / DRIVER_STATE).is_file() and not (p / checkpoint_manifest.MANIFEST).is_file():
            found = (
                CheckpointManager(p, verify="checksum" if self.checksums else "size").newest_intact(say)
                if p.is_dir()
                else None
            )
            if found is None:
                raise CheckpointError(
                    f"checkpoint.resume={resume!r}: no complete checkpoint there (need {DRIVER_STATE})"
                )
            return found
        problems = self.damage(p)
        if problems:
            other = CheckpointManager(p.parent).newest_intact(lambda _: None, before=self.step_of(p))
            fix = f"pick checkpoint.resume={other} (intact)" if other else "start a new run: checkpoint.resume=never"
            raise CheckpointError(f"checkpoint.resume={resume}: damaged: " + "; ".join(problems) + f"; {fix}")
        return p

    def damage(self, path: Path) -> list[str]:
        """What is wrong with the checkpoint ``path``, one line per file (empty: intact). A checkpoint this process
        found intact already (rlhf-run verifies before its heavy imports) is not hashed twice."""
        path = Path(path)
        seal = path / checkpoint_manifest.MANIFEST
        key = (path.resolve(), seal.stat().st_mtime_ns if seal.is_file() else None, self.checksums)
        if key in _INTACT:
            return []
        problems = checkpoint_manifest.damage(path, self.checksums)
        state = path / DRIVER_STATE
        if not state.is_file():
            if not any(line.startswith(f"{DRIVER_STATE}:") for line in problems):
                problems.append(f"{DRIVER_STATE}: missing")
        else:
            try:
                json.loads(state.read_text())["step"]
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{DRIVER_STATE}: unreadable ({type(e).__name__})")
        if not problems and key[1] is not None:
            _INTACT.add(key)
        return problems

    def _candidates(self, before: int | None = None) -> list[tuple[int, Path]]:
        """Checkpoint folders, newest first: the one ``latest`` names, then older ones (a newer folder the pointer
        does not name belongs to a timeline a resume from an earlier step left behind)."""
        if not self.root.is_dir():
            return []
        found = sorted(
            ((int(m.group(1)), p) for p in self.root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()),
            reverse=True,
        )
        pointer = self.root / LATEST
        named = pointer.read_text().strip() if pointer.is_file() else ""
        top = next((step for step, p in found if p.name == named), None)
        if top is not None:
            found = [(step, p) for step, p in found if step <= top]
        if before is not None:
            found = [(step, p) for step, p in found if step < before]
        return found

    def newest_intact(self, say: Callable[[str], None] = print_note, before: int | None = None) -> Path | None:
        """The newest checkpoint that passes its manifest (None when there is none at all); each damaged one newer
        than it is said, naming its files; a CheckpointError when every one is damaged."""
        damaged = []
        for step, p in self._candidates(before):
            problems = self.damage(p)
            if not problems:
                if damaged and (p, "fallback") not in _SAID:
                    _SAID.add((p, "fallback"))
                    say(f"resuming from {p}, the newest intact checkpoint (step {step})")
                return p
            damaged.append(p)
            if (p, "damage") not in _SAID:  # rlhf-run verifies before the run does: each line said once
                _SAID.add((p, "damage"))
                say(f"checkpoint {p} is damaged, not resuming from it: " + "; ".join(problems))
        if damaged:
            raise CheckpointError(
                f"no intact checkpoint in {self.root} (damaged: {', '.join(p.name for p in damaged)}); to start this "
                "run again from step 0: checkpoint.resume=never"
            )
        return None

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
        checkpoint_manifest.write(tmp, self.checksums)  # last: a checkpoint without it is not sealed
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
