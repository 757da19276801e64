"""A checkpoint's manifest: every file in it with its size and SHA-256, written last, so that a checkpoint proves
itself before a resume loads it (what PyTorch Distributed Checkpoint's and Orbax's metadata-last commit does).

``manifest.json`` lies in the checkpoint folder beside ``driver_state.json``; its ``files`` map each path (relative,
POSIX) to ``{"bytes": N, "sha256": HEX}``. ``sha256sum`` can check a file by hand. Hashing runs on a few threads
(hashlib releases the GIL on large buffers): about 1.5 GB/s per core here; ``checkpoint.verify=size`` skips the
checksums for checkpoints so large that reading them back costs more than it is worth.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FORMAT = 1
_CHUNK = 8 << 20


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _threads(n: int) -> int:
    return max(1, min(n, 8, os.cpu_count() or 1))


def build(folder: Path, checksums: bool = True) -> dict[str, Any]:
    """The manifest of ``folder`` as it is now."""
    folder = Path(folder)
    files = _files(folder)
    sums: list[str | None] = [None] * len(files)
    if checksums and files:
        with ThreadPoolExecutor(_threads(len(files))) as pool:
            sums = list(pool.map(sha256_of, files))
    entries = {}
    for p, digest in zip(files, sums, strict=True):
        entry: dict[str, Any] = {"bytes": p.stat().st_size}
        if digest is not None:
            entry["sha256"] = digest
        entries[p.relative_to(folder).as_posix()] = entry
    return {"format": FORMAT, "files": entries}


def write(folder: Path, checksums: bool = True) -> Path:
    """Seal ``folder``: its manifest, written atomically (the last file of a checkpoint)."""
    path = Path(folder) / MANIFEST
    manifest = build(folder, checksums)
    tmp = path.with_name(f".{MANIFEST}.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _size(n: int) -> str:
    return f"{n:,} bytes"


def damage(folder: Path, checksums: bool = True) -> list[str]:
    """What is wrong with ``folder`` against its manifest, one line per file naming it relative to ``folder``
    (empty: intact). A folder without a manifest (written before manifests existed) is not judged here."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text())["files"]
    except (ValueError, KeyError, TypeError) as e:
        return [f"{MANIFEST}: unreadable ({type(e).__name__})"]
    problems: list[str] = []
    to_hash: list[tuple[Path, str, str]] = []
    for rel, entry in entries.items():
        p = folder / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = p.stat().st_size
        if size != entry["bytes"]:
            what = "truncated" if size < entry["bytes"] else "grown"
            problems.append(f"{rel}: {what} ({_size(size)}, the manifest says {_size(entry['bytes'])})")
        elif checksums and "sha256" in entry:
            to_hash.append((p, rel, entry["sha256"]))
    if to_hash:
        with ThreadPoolExecutor(_threads(len(to_hash))) as pool:
            found = list(pool.map(sha256_of, (p for p, _, _ in to_hash)))
        problems += [
            f"{rel}: changed (its SHA-256 differs from the manifest's)"
            for (_, rel, want), got in zip(to_hash, found, strict=True)
            if got != want
        ]
    return problems
