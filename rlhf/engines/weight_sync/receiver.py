"""The receiving end of a weight sync: a rollout engine worker turns the stream back into (name, tensor) pairs
for its engine's own weight-loading path, checking every tensor's checksum on the bytes it received."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import torch
from torch import Tensor

from rlhf import faults
from rlhf.engines.weight_sync.group import GroupConfig, SyncGroup
from rlhf.engines.weight_sync.shared import HostSegment, open_cuda
from rlhf.engines.weight_sync.wire import ChecksumMismatch, Digest, Entry, Header, SyncReport, checksum


class WeightReceiver:
    """One member of the sync group besides the sender.

    ``stable``: the yielded tensors stay valid after the iterator moves on (vLLM's layer-wise reload buffers a
    layer's tensors until the layer is complete, so its receiver needs this); otherwise they are views that the
    next bucket overwrites, and the consumer must copy each one before asking for the next (the hf engine does).
    """

    def __init__(self, cfg: GroupConfig, *, device: torch.device, route: str, stable: bool = False) -> None:
        if route not in ("broadcast", "shared_memory"):
            raise ValueError(f"weight-sync route {route!r}: use broadcast or shared_memory")
        self.group = SyncGroup(cfg)
        self.device = device
        self.route = route
        self.stable = stable
        self.label = f"rank {cfg.rank}"
        self._segment: HostSegment | None = None
        self._shared: Tensor | None = None
        self._scratch: Tensor | None = None
        desc = json.loads(bytes(self.group.recv_bytes().numpy().tobytes()).decode() or "{}")
        if route == "shared_memory":
            if desc.get("kind") == "host":
                self._segment = HostSegment(desc["path"], int(desc["nbytes"]), create=False)
                self._shared = self._segment.tensor
            elif desc.get("kind") == "cuda":
                self._shared = open_cuda(desc)
            else:
                raise RuntimeError("weight sync: shared_memory route chosen but the sender shares no buffer")
        self.group.barrier()
        self.report = SyncReport(version=-1, side="receiver", route=route)

    def _payload(self, header: Header) -> Tensor:
        if self._shared is not None:
            return self._shared[: header.nbytes]
        if self.stable or self._scratch is None or self._scratch.numel() < header.nbytes:
            buf = torch.empty(header.nbytes, dtype=torch.uint8, device=self.device)
            if not self.stable:
                self._scratch = buf
        else:
            buf = self._scratch
        payload = buf[: header.nbytes]
        self.group.broadcast_data(payload)
        return payload

    def pull(self, version: int) -> Iterator[tuple[str, Tensor]]:
        """Yield the sync's tensors as they arrive. Raises :class:`ChecksumMismatch` at the end if any tensor's
        bytes differed (tensors from the first mismatch on are not yielded, the stream is still drained so the
        sender never waits on us). A consumer that stops early makes the receiver drain the rest of the stream."""
        t0 = time.perf_counter()
        report = self.report = SyncReport(version=version, side="receiver", route=self.route)
        digest = Digest()
        corrupt = faults.fault("sync.corrupt")
        exit_after = faults.fault("sync.exit_after_bucket")
        mismatch: str | None = None
        finished = False
        try:
            while True:
                header = Header.decode(self.group.recv_bytes())
                if header.version != version:
                    raise RuntimeError(f"weight sync: expected version {version}, the sender sent {header.version}")
                if header.last:
                    finished = True
                    report.digest = digest.hexdigest()
                    if mismatch is None and header.digest and report.digest != header.digest:
                        mismatch = "(sync digest)"
                    break
                payload = self._payload(header)
                report.buckets += 1
                if exit_after and report.buckets >= int(exit_after):
                    os._exit(1)  # fault injection: this process dies mid-sync
                items: list[tuple[str, Tensor]] = []
                for e in header.entries:
                    data = payload[e.offset : e.offset + e.nbytes]
                    if corrupt and e.name == corrupt:
                        data = data.clone()
                        data[0] ^= 0xFF  # fault injection: one byte flipped in transit
                    got = checksum(data) if e.checksum is not None else None
                    digest.add(Entry(e.name, e.dtype, e.shape, e.offset, e.nbytes, got))
                    if got != e.checksum and mismatch is None:
                        mismatch = f"{e.name} (received checksum {got}, sent {e.checksum})"
                    if mismatch is None:
                        items.append((e.name, data.view(getattr(torch, e.dtype)).view(e.shape)))
                    report.tensors += 1
                    report.bytes += e.nbytes
                acked = False
                if self.stable and self._shared is not None:
                    items = [(n, t.clone()) for n, t in items]  # own copies: the shared buffer is reused next
                    if header.barrier:
                        self.group.barrier()
                        acked = True
                yield from items
                if header.barrier and not acked:
                    self.group.barrier()
        except GeneratorExit:
            if not finished:
                self._drain(version)
            raise
        report.seconds = time.perf_counter() - t0
        report.first_mismatch = mismatch
        if mismatch is not None:
            raise ChecksumMismatch(f"weight sync v{version}: tensor {mismatch} differs from what the sender sent")

    def _drain(self, version: int) -> None:
        """Receive and drop the rest of a sync (the consumer stopped early), so the sender is not left waiting."""
        while True:
            header = Header.decode(self.group.recv_bytes())
            if header.last:
                return
            self._payload(header)
            if header.barrier:
                self.group.barrier()

    def close(self) -> None:
        self.group.close()
        if self._segment is not None:
            self._segment.close()
        self._segment = None
        self._shared = None
