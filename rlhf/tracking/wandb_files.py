"""Reading a W&B run's own transaction log (``<dir>/wandb/{offline-,}run-<time>-<id>/run-<id>.wandb``) back.

W&B writes every record of a run (the run, its history rows, its summary, its exit) to that file first, offline
and online alike; ``wandb sync`` uploads it. Its Python reader (``wandb.sdk.internal.datastore``) left the package
when W&B moved to its Go core (0.18) and no public reader replaced it, so this reads the documented LevelDB log
layout the file keeps (a 7-byte ``:W&B`` header, 32 KiB blocks of CRC-checked chunks) and parses each record with
W&B's own generated protobuf classes (``wandb.proto.wandb_internal_pb2.Record``). The tracker uses it to learn
the highest step and the config a killed attempt's files hold; the tests use it to read the metrics back.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<4sHB")  # ident, magic, version
IDENT, MAGIC = b":W&B", 0xBEE1
CHUNK = struct.Struct("<IHB")  # crc32 (seeded with the chunk type), length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _chunks_crc_ok(crc: int, kind: int, data: bytes) -> bool:
    return zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc


def raw_records(path: Path) -> Iterator[bytes]:
    """The serialized records of one ``.wandb`` file, in order; reading stops at a torn or corrupt tail (what a
    killed process leaves), like LevelDB's own recovery."""
    data = Path(path).read_bytes()
    if len(data) < HEADER.size:
        return
    ident, magic, _ = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC:
        raise ValueError(f"{path}: not a W&B run file (header {ident!r} {magic:#x})")
    pos, pending = HEADER.size, b""
    while pos + CHUNK.size <= len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK.size:  # the block's tail is padding
            pos += room
            continue
        crc, length, kind = CHUNK.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding to the block's end
            pos += room
            continue
        body = data[pos + CHUNK.size : pos + CHUNK.size + length]
        if len(body) < length or not _chunks_crc_ok(crc, kind, body):
            return
        pos += CHUNK.size + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            pending = body
        elif kind == MIDDLE:
            pending += body
        elif kind == LAST:
            yield pending + body
            pending = b""
        else:
            return


@dataclass
class RunFile:
    """What one attempt's ``.wandb`` file holds."""

    path: Path
    run_id: str = ""
    project: str = ""
    group: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per step, with "_step"
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    files: list[str] = field(default_factory=list)  # saved with run.save


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run_file(path: Path) -> RunFile:
    from wandb.proto import wandb_internal_pb2 as pb

    out = RunFile(Path(path))
    for raw in raw_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            out.run_id, out.project, out.group, out.name = r.run_id, r.project, r.run_group, r.display_name
            out.config.update({_key(i): json.loads(i.value_json) for i in r.config.update})
        elif kind == "config":
            out.config.update({_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            out.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            out.summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "exit":
            out.exit_code = record.exit.exit_code
        elif kind == "files":
            out.files.extend(f.path for f in record.files.files)
    return out


def attempt_order(folder: str, run_id: str) -> tuple[str, int] | None:
    """Where an attempt folder of run ``run_id`` sorts among the run's attempts (None: not one of them).

    W&B names an attempt's folder ``{offline-,}run-<local time to the second>-<id>`` and, when that folder already
    exists (a second attempt of the id started within the same second: ``end_stale`` and the resume that follows
    it in one ``rlhf-run`` often do), adds ``-<n>``, counting up from 1 (``wandb.sdk.wandb_init``,
    ``set_sync_dir_suffix``). Attempts sort by time, then by that number."""
    m = re.fullmatch(rf"(?:offline-)?run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?", folder)
    return (m.group(1), int(m.group(2) or 0)) if m else None


def run_files(wandb_dir: Path, run_id: str) -> list[RunFile]:
    """Every attempt of run ``run_id`` under ``wandb_dir`` (the ``wandb`` folder W&B made), oldest first, the
    attempts W&B had to number included."""
    found = {}
    for path in Path(wandb_dir).glob(f"*run-*/run-{run_id}.wandb"):
        order = attempt_order(path.parent.name, run_id)
        if order is not None:
            found[order] = path
    return [read_run_file(found[k]) for k in sorted(found)]
