"""Folders that appear complete or not at all, and a full disk reported in one line.

Every checkpoint and every saved model is written into a temporary sibling (``.tmp-NAME``), its files are synced,
and only then is it renamed to ``NAME``: a crash or a full disk in the middle leaves ``NAME`` as it was (the previous
version, or nothing) and the partial folder is removed. Any training engine (DeepSpeed, FSDP2, ...) saves through
:func:`atomic_dir`:

    with atomic_dir(run_dir / "model", need_bytes=weight_bytes, what="the final model") as tmp:
        model.save_pretrained(tmp)

Before writing, the free space is checked against ``need_bytes`` plus a margin (:data:`MARGIN`, at least
:data:`MIN_MARGIN_BYTES`): estimates (the last checkpoint's size, the weights' bytes) miss the small files beside
them and the filesystem's own blocks. A save that does not fit, or fails with ENOSPC at any write, raises
:class:`DiskFull`: one line naming the folder, the bytes needed (with the margin spelled out) and the bytes free.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlhf import faults
from rlhf.errors import UserError

MARGIN = 0.10  # of the estimate
MIN_MARGIN_BYTES = 2**20
TMP_PREFIX = ".tmp-"
FILLER = ".rlhf-fault-filler"  # what the disk.fill_* fault points write (tests only)

# How a full disk shows when the writer drops errno: torch's stream writer ("file write failed", "basic_ios::clear:
# iostream error", "unexpected pos") and safetensors ("StorageFull").
_FULL_DISK_TEXT = ("No space left", "ENOSPC", "StorageFull", "file write failed", "iostream error", "unexpected pos")


def human_bytes(n: float) -> str:
    """MB (2**20 bytes) with 2 decimals below 10 GB, else GB: 6.11 MB needed reads differently from 6.05 MB free."""
    if n >= 10 * 2**30:
        return f"{n / 2**30:.2f} GB"
    return f"{n / 2**20:.2f} MB"


def with_margin(need: int) -> int:
    return need + max(int(need * MARGIN), MIN_MARGIN_BYTES)


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes for this user on the filesystem of ``path`` (its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def tree_bytes(path: str | os.PathLike) -> int:
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def tensors_bytes(state: Mapping[str, Any] | None) -> int | None:
    """The bytes of a state dict's tensors (what a safetensors file of them takes, give or take its header)."""
    if not state:
        return None
    unique = {t.data_ptr(): t for t in state.values()}  # tied weights are stored once
    return sum(t.numel() * t.element_size() for t in unique.values())


class DiskFull(UserError):
    """A save that does not fit or failed on a full disk. ``written``: the bytes written when the disk filled (None:
    refused before writing). ``hint`` (what is still good, how to go on) is added by the caller that knows it (the
    run lifecycle: the last checkpoint and the resume command)."""

    def __init__(
        self, what: str, path: str, need: int | None, free: int, written: int | None = None, hint: str = ""
    ) -> None:
        self.what, self.path, self.need, self.free, self.written, self.hint = what, path, need, free, written, hint
        super().__init__(self.line())

    def line(self) -> str:
        if self.need:
            need, margin = human_bytes(self.need), human_bytes(with_margin(self.need) - self.need)
            size = f"it needs {need} + {margin} margin = {human_bytes(with_margin(self.need))}"
        elif self.written:
            size = f"it needs more than the {human_bytes(self.written)} written when the disk filled"
        else:
            size = "nothing could be written"
        if self.written is None:
            text = f"not enough free space to save {self.what} into {self.path}: {size}, {human_bytes(self.free)} free"
        else:
            text = (
                f"saving {self.what} into {self.path} failed: no space left on device ({size}, "
                f"{human_bytes(self.free)} free); the partial folder was removed"
            )
        return f"{text}; {self.hint}" if self.hint else text

    def with_hint(self, hint: str) -> DiskFull:
        return DiskFull(self.what, self.path, self.need, self.free, self.written, hint)

    def __reduce__(self):  # it crosses process boundaries (a Ray actor's error reaches the driver)
        return DiskFull, (self.what, self.path, self.need, self.free, self.written, self.hint)

    def __str__(self) -> str:
        return self.line()


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` or anything in its chain (a Ray worker's error, say) says the disk is full."""
    e: BaseException | None = error
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno == errno.ENOSPC):
            return True
        if any(t in str(e) for t in _FULL_DISK_TEXT):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def check_room(folder: str | os.PathLike, need: int | None, what: str) -> None:
    """Raise :class:`DiskFull` (nothing written) unless the filesystem ``folder`` would be on has ``need`` bytes plus
    the margin."""
    if not need:
        return
    free = free_bytes(folder)
    if free < with_margin(need):
        raise DiskFull(what, str(folder), need, free)


def sync_tree(path: Path) -> None:
    """fsync every file under ``path`` and the folders holding them, so that the rename publishes written data."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _sync_dir(Path(root))


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot sync a folder: the rename is still atomic
        pass
    finally:
        os.close(fd)


def publish(tmp: Path, final: Path) -> None:
    """Rename the complete ``tmp`` to ``final``, replacing a folder already there. ``final`` is never partial: it is
    the old folder, briefly absent, then the new one."""
    sync_tree(tmp)
    old = None
    if final.exists():
        old = final.with_name(f"{TMP_PREFIX}old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)
    _sync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def fill_disk(folder: Path, leave: int = 64 * 2**10) -> None:
    """Fault injection (``disk.fill_*``): fill ``folder``'s filesystem up to ``leave`` free bytes with a file named
    :data:`FILLER`, as another process writing to the same disk would. Tests run it on a small tmpfs only."""
    with open(folder / FILLER, "ab") as f:
        chunk = b"\0" * 2**20
        try:
            while (room := free_bytes(folder) - leave) > 0:
                f.write(chunk[: min(room, len(chunk))])
                f.flush()
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise


def begin_dir(final: Path, need_bytes: int | None, what: str) -> Path:
    """The fresh temporary sibling of ``final`` (a stale one removed), after :func:`check_room`."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(TMP_PREFIX + final.name)
    shutil.rmtree(tmp, ignore_errors=True)
    check_room(final, need_bytes, what)
    try:
        tmp.mkdir()
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DiskFull(what, str(tmp), need_bytes, free_bytes(final.parent), written=0) from None
        raise
    return tmp


def abort_dir(tmp: Path, error: BaseException, need_bytes: int | None, what: str) -> None:
    """Remove the partial ``tmp``; raise :class:`DiskFull` from ``error`` when the disk was full."""
    written, free = tree_bytes(tmp), free_bytes(tmp)  # measured before the cleanup gives the space back
    shutil.rmtree(tmp, ignore_errors=True)
    if isinstance(error, DiskFull) or not isinstance(error, Exception):  # Ctrl-C stays Ctrl-C
        return
    if is_disk_full(error) or free < MIN_MARGIN_BYTES:
        raise DiskFull(what, str(tmp), need_bytes, free, written=written) from error


@contextmanager
def atomic_dir(
    final: str | os.PathLike, *, need_bytes: int | None = None, what: str = "the model", fault_point: str = ""
) -> Iterator[Path]:
    """Yield a temporary sibling folder of ``final`` to write into; renamed to ``final`` once the block ends
    without error (replacing an older ``final``), removed otherwise. A full disk raises :class:`DiskFull`.

    ``fault_point``: a ``disk.fill_*`` point of rlhf.faults that fills the disk once the room was checked (tests).
    """
    final = Path(final)
    tmp = begin_dir(final, need_bytes, what)
    try:
        if fault_point and faults.count_hits(fault_point):
            fill_disk(final.parent)
        yield tmp
        publish(tmp, final)
    except BaseException as e:
        abort_dir(tmp, e, need_bytes, what)
        raise
