"""The sending end of a weight sync: the policy's rank 0 streams buckets to every rollout engine worker."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable

import torch
from torch import Tensor

from rlhf.engines.weight_sync.group import GroupConfig, SyncGroup
from rlhf.engines.weight_sync.shared import HostSegment, cuda_handle
from rlhf.engines.weight_sync.wire import Digest, Header, SyncReport, bucket_bytes, pack


class WeightSender:
    """Rank 0 of the sync group.

    ``capacity``: bytes of the bucket buffer (at least the largest single tensor). With ``shared`` set ("host" on
    CPU, "cuda" on GPUs) the buffer is shared with the receivers on this node/device, and a bucket is acknowledged by
    every receiver before the buffer is reused; broadcast receivers get each bucket over the data group from the same
    buffer. Without it the buffer is allocated for the duration of a sync only.
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
    ) -> None:
        self.group = SyncGroup(cfg, listen)
        self.device = device
        self.capacity = capacity
        self.checksums = checksums
        self.broadcasting = len(cfg.data_ranks) > 1
        self._segment: HostSegment | None = None
        self._shared_buffer: Tensor | None = None
        desc: dict = {}
        if shared == "host":
            self._segment = HostSegment.create(capacity)
            self._shared_buffer = self._segment.tensor
            desc = self._segment.describe()
        elif shared == "cuda":
            self._shared_buffer = torch.empty(capacity, dtype=torch.uint8, device=device)
            desc = cuda_handle(self._shared_buffer)
        # Hello: every receiver learns where the shared buffer is and maps it; then its name can go.
        self.group.send_bytes(torch.frombuffer(bytearray(json.dumps(desc).encode()), dtype=torch.uint8))
        self.group.barrier()
        if self._segment is not None:
            self._segment.unlink()

    def _buffer(self, nbytes: int, scratch: list[Tensor]) -> Tensor:
        if self._shared_buffer is not None:
            if nbytes > self._shared_buffer.numel():
                raise RuntimeError(
                    f"weight sync: a bucket of {nbytes} bytes exceeds the shared buffer ({self._shared_buffer.numel()})"
                )
            return self._shared_buffer
        if not scratch or scratch[0].numel() < nbytes:
            scratch[:] = [torch.empty(max(nbytes, self.capacity), dtype=torch.uint8, device=self.device)]
        return scratch[0]

    def push(self, buckets: Iterable[list[tuple[str, Tensor]]], version: int) -> SyncReport:
        """Send every bucket, then the closing header with the sync's digest."""
        t0 = time.perf_counter()
        report = SyncReport(
            version=version, side="sender", route="shared_memory" if self._shared_buffer is not None else "broadcast"
        )
        digest = Digest()
        scratch: list[Tensor] = []
        for bucket in buckets:
            nbytes = bucket_bytes(bucket)
            buf = self._buffer(nbytes, scratch)
            entries = pack(bucket, buf, self.checksums)
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()  # the bytes are in place before anyone reads
            header = Header(version=version, entries=entries, nbytes=nbytes, barrier=self._shared_buffer is not None)
            self.group.send_bytes(header.encode())
            if self.broadcasting:
                self.group.broadcast_data(buf[:nbytes])
            if header.barrier:
                self.group.barrier()
            for e in entries:
                digest.add(e)
            report.tensors += len(entries)
            report.bytes += sum(e.nbytes for e in entries)
            report.buckets += 1
        report.digest = digest.hexdigest()
        self.group.send_bytes(Header(version=version, last=True, digest=report.digest).encode())
        report.seconds = time.perf_counter() - t0
        return report

    def close(self) -> None:
        self.group.close()
        if self._segment is not None:
            self._segment.close()
        self._segment = None
        self._shared_buffer = None
