"""The sending end of a weight sync: the policy's rank 0 streams buckets to every rollout engine worker."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable

import torch
from torch import Tensor

from rlhf.backends.weight_sync.group import GroupConfig, SyncGroup
from rlhf.backends.weight_sync.segment import HostSegment, cuda_handle
from rlhf.backends.weight_sync.wire import Digest, Entry, Header, SyncReport, aligned, as_bytes, checksum, pack

# Bytes per shared-memory transfer: small enough that packing the next chunk overlaps the receivers reading this
# one, large enough that the per-chunk handshake does not count.
SHARED_CHUNK = 256 << 20


def _chunks(bucket: list[tuple[str, Tensor]], limit: int) -> list[list[tuple[str, Tensor]]]:
    """A bucket cut into runs of tensors of at most ``limit`` bytes (a larger tensor alone)."""
    out: list[list[tuple[str, Tensor]]] = [[]]
    size = 0
    for name, t in bucket:
        n = aligned(t.numel() * t.element_size())
        if out[-1] and size + n > limit:
            out.append([])
            size = 0
        out[-1].append((name, t))
        size += n
    return [c for c in out if c]


class WeightSender:
    """Rank 0 of the sync group.

    ``capacity``: bytes of one bucket (at least the largest single tensor). With ``shared`` ("host" on CPU, "cuda"
    on GPUs) the sender packs each bucket into one half of a buffer shared with the receivers beside it, while they
    read the previous bucket from the other half (each bucket is acknowledged before its half is reused). Broadcast
    receivers get every tensor over the data group: from the shared half when there is one, else straight from the
    trainer's (gathered) parameters, without a copy.
    """

    def __init__(
        self,
        cfg: GroupConfig,
        listen: socket.socket,
        *,
        device: torch.device,
        capacity: int,
        checksums: bool = True,
        shared: str | None = None,
        largest_tensor: int = 0,
    ) -> None:
        self.group = SyncGroup(cfg, listen)
        self.device = device
        # Every tensor of a bucket is padded to 64 bytes: room for a thousand of them beyond the bucket size.
        self.capacity = aligned(capacity) + (1 << 16)
        self.largest = aligned(capacity)
        self.checksums = checksums
        self.broadcasting = len(cfg.data_ranks) > 1
        self._segment: HostSegment | None = None
        self._shared_buffer: Tensor | None = None
        desc: dict = {}
        if shared is not None:
            # Shared transfers go in chunks of SHARED_CHUNK (or the largest tensor), two halves in turn.
            self.capacity = max(min(SHARED_CHUNK, self.largest), largest_tensor) + (1 << 16)
        if shared == "host":
            self._segment = HostSegment.create(2 * self.capacity)
            self._shared_buffer = self._segment.tensor
            desc = self._segment.describe()
        elif shared == "cuda":
            self._shared_buffer = torch.empty(2 * self.capacity, dtype=torch.uint8, device=device)
            desc = cuda_handle(self._shared_buffer)
        # Hello: every receiver learns where the shared buffer is and maps it; then its name can go.
        self.group.send_bytes(torch.frombuffer(bytearray(json.dumps(desc).encode()), dtype=torch.uint8))
        self.group.barrier()
        if self._segment is not None:
            self._segment.unlink()

    def push(self, buckets: Iterable[list[tuple[str, Tensor]]], version: int) -> SyncReport:
        """Send every bucket, then the closing header with the sync's digest."""
        t0 = time.perf_counter()
        shared = self._shared_buffer is not None
        report = SyncReport(version=version, side="sender", route="shared_memory" if shared else "broadcast")
        try:
            self._push(buckets, version, report)
        except BaseException:
            self.group.abort()  # the receivers stop waiting on us
            raise
        report.seconds = time.perf_counter() - t0
        return report

    def _entries(self, bucket: list[tuple[str, Tensor]]) -> tuple[list[Entry], list[Tensor]]:
        """Entries (offsets as the bucket would be packed) and each tensor's bytes, without packing."""
        entries, data, offset = [], [], 0
        for name, t in bucket:
            raw = as_bytes(t)
            entries.append(
                Entry(
                    name=name,
                    dtype=str(t.dtype).removeprefix("torch."),
                    shape=tuple(t.shape),
                    offset=offset,
                    nbytes=raw.numel(),
                    checksum=checksum(raw) if self.checksums else None,
                )
            )
            data.append(raw)
            offset += aligned(raw.numel())
        return entries, data

    def _push(self, buckets: Iterable[list[tuple[str, Tensor]]], version: int, report: SyncReport) -> None:
        digest = Digest()
        shared = self._shared_buffer
        owed_ack = False  # the previous bucket's acknowledgement, collected after packing the next one
        if shared is not None:
            limit = self.capacity - (1 << 16)
            buckets = (chunk for bucket in buckets for chunk in _chunks(bucket, limit))
        for i, bucket in enumerate(buckets):
            if shared is not None:
                offset = (i % 2) * self.capacity  # the half the bucket before last used; acknowledged already
                entries = pack(bucket, shared[offset : offset + self.capacity], self.checksums)
                data = [shared[offset + e.offset : offset + e.offset + e.nbytes] for e in entries]
                if self.device.type == "cuda":
                    torch.cuda.current_stream(self.device).synchronize()  # the bytes are in place before anyone reads
            else:
                offset = -1
                entries, data = self._entries(bucket)
            if owed_ack:
                self.group.barrier()
            nbytes = entries[-1].offset + entries[-1].nbytes if entries else 0
            header = Header(version, entries, nbytes, barrier=shared is not None, shared_offset=offset)
            self.group.send_bytes(header.encode())
            if self.broadcasting:
                for raw in data:
                    self.group.broadcast_data(raw)
            owed_ack = header.barrier
            for e in entries:
                digest.add(e)
            report.tensors += len(entries)
            report.bytes += sum(e.nbytes for e in entries)
            report.buckets += 1
        if owed_ack:
            self.group.barrier()
        report.digest = digest.hexdigest()
        self.group.send_bytes(Header(version=version, last=True, digest=report.digest).encode())

    def close(self) -> None:
        self.group.close()
        if self._segment is not None:
            self._segment.close()
        self._segment = None
        self._shared_buffer = None
