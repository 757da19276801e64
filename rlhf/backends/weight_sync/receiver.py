"""The receiving end of a weight sync: a rollout engine worker turns the stream back into (name, tensor) pairs
for its engine's own weight-loading path, checking every tensor's checksum on the bytes it received."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from rlhf import faults
from rlhf.backends.weight_sync.group import GroupConfig, SyncGroup
from rlhf.backends.weight_sync.segment import HostSegment, open_cuda
from rlhf.backends.weight_sync.wire import (
    ChecksumMismatch,
    Digest,
    Entry,
    Header,
    SyncReport,
    checksum,
    copy_with_checksum,
)

# Where a received tensor may land directly (the engine's own parameter), or None for a buffer.
Destination = Callable[[Entry], "Tensor | None"]


class DeviceCopies:
    """Copies out of the shared buffer into memory the engine keeps. On a GPU ``copy_`` only enqueues the copy on
    the current stream, so :meth:`settle` waits for the stream before the receiver acknowledges the bucket: after
    the acknowledgement the sender repacks that half of the buffer. The checksum is taken on the copy (the bytes the
    engine keeps), so a copy that read a half already being overwritten is caught."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def copy(self, dst: Tensor, src: Tensor, with_checksum: bool) -> str | None:
        if with_checksum:
            return copy_with_checksum(dst, src)
        dst.copy_(src)
        return None

    def checksum(self, data: Tensor) -> str:
        return checksum(data)

    def settle(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()


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
        self._segment: HostSegment | None = None
        self._shared: Tensor | None = None
        self._scratch: Tensor | None = None
        self.copies = DeviceCopies(device)
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

    def _buffer(self, nbytes: int) -> Tensor:
        if self.stable or self._scratch is None or self._scratch.numel() < nbytes:
            buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            if not self.stable:
                self._scratch = buf
            return buf
        return self._scratch

    def pull(self, version: int, into: Destination | None = None) -> Iterator[tuple[str, Tensor]]:
        """Yield the sync's tensors as they arrive. ``into(entry)`` may name a tensor to receive straight into
        (the engine's parameter: no copy on the broadcast route, one on the shared one); such tensors are not
        yielded. Raises :class:`ChecksumMismatch` at the end if any tensor's bytes differed (tensors from the first
        mismatch on are not yielded; the stream is still drained so the sender never waits on us). A consumer that
        stops early makes the receiver drain the rest of the stream."""
        t0 = time.perf_counter()
        report = self.report = SyncReport(version=version, side="receiver", route=self.route)
        digest = Digest()
        state = {"mismatch": None, "finished": False}
        if faults.count_hits("sync.drop"):
            # fault injection: the stream is received, checked and acknowledged, and nothing reaches the engine (a
            # sync that silently delivers nothing, which only the log-prob probe can notice)
            for _ in self._stream(version, None, report, digest, state):
                pass
            report.seconds = time.perf_counter() - t0
            return
        try:
            yield from self._stream(version, into, report, digest, state)
        except GeneratorExit:
            if not state["finished"]:
                self._drain()
            raise
        except BaseException:
            self.group.abort()  # a broken stream: the sender and the other receivers stop waiting
            raise
        report.seconds = time.perf_counter() - t0
        report.first_mismatch = state["mismatch"]
        if state["mismatch"] is not None:
            raise ChecksumMismatch(
                f"weight sync v{version}: tensor {state['mismatch']} differs from what the sender sent"
            )

    def _stream(self, version, into, report, digest, state) -> Iterator[tuple[str, Tensor]]:
        corrupt = faults.fault("sync.corrupt")
        exit_after = faults.fault("sync.exit_after_bucket")
        stop_after = faults.fault("sync.stop_after_bucket")
        while True:
            header = Header.decode(self.group.recv_bytes())
            if header.version != version:
                raise RuntimeError(f"weight sync: expected version {version}, the sender sent {header.version}")
            if header.last:
                state["finished"] = True
                report.digest = digest.hexdigest()
                if state["mismatch"] is None and header.digest and report.digest != header.digest:
                    state["mismatch"] = "(sync digest)"
                return
            report.buckets += 1
            if self._shared is not None and header.shared_offset >= 0:
                out = self._from_shared(header, into, report, digest, state, corrupt)
                self.copies.settle()  # every copy out of this half is done before the sender may reuse it
                self.group.barrier()
                yield from out
                continue
            out: list[tuple[str, Tensor]] = []
            payload = self._buffer(header.nbytes)
            for e in header.entries:
                dest = into(e) if into is not None and state["mismatch"] is None else None
                data = payload[e.offset : e.offset + e.nbytes]
                if dest is not None:
                    data = dest.view(-1).view(torch.uint8)  # straight into the engine's parameter
                self.group.broadcast_data(data)
                if exit_after and report.buckets >= int(exit_after) and faults.first_time("sync.exit_after_bucket"):
                    os._exit(1)  # fault injection: this process dies mid-sync
                if stop_after and report.buckets >= int(stop_after) and faults.first_time("sync.stop_after_bucket"):
                    faults.stop_self("sync.stop_after_bucket")  # fault injection: this process stops mid-sync
                if corrupt and e.name == corrupt:
                    if dest is None:
                        data = data.clone()
                    data[0] ^= 0xFF  # fault injection: one byte flipped in transit
                got = self.copies.checksum(data) if e.checksum is not None else None
                self._take(e, got, data, dest, out, report, digest, state)
            if header.barrier:
                # beside shared-memory receivers: acknowledge too (our bytes are our own, so at once)
                self.copies.settle()
                self.group.barrier()
            yield from out

    def _take(self, e: Entry, got: str | None, kept: Tensor, dest, out: list, report, digest, state) -> None:
        """Record a received tensor (``got``: the checksum of the bytes kept); yield it later unless it landed in
        the engine's own parameter or a mismatch was found (from then on nothing is handed to the engine)."""
        digest.add(Entry(e.name, e.dtype, e.shape, e.offset, e.nbytes, got))
        if got != e.checksum and state["mismatch"] is None:
            state["mismatch"] = f"{e.name} (received checksum {got}, sent {e.checksum})"
        report.tensors += 1
        report.bytes += e.nbytes
        if state["mismatch"] is not None:
            return
        if dest is not None:
            report.in_place += 1
            return
        out.append((e.name, kept.view(getattr(torch, e.dtype)).view(e.shape)))

    def _from_shared(self, header: Header, into, report, digest, state, corrupt) -> list[tuple[str, Tensor]]:
        """Copy a bucket out of its shared half into memory this engine keeps (its parameter, or a buffer of its
        own), checksumming the copy; the caller settles the copies and acknowledges before yielding."""
        exit_after = faults.fault("sync.exit_after_bucket")
        shared = self._shared[header.shared_offset :]
        own = None if self.stable else self._buffer(header.nbytes)
        out: list[tuple[str, Tensor]] = []
        for e in header.entries:
            dest = into(e) if into is not None and state["mismatch"] is None else None
            src = shared[e.offset : e.offset + e.nbytes]
            if dest is not None:
                kept = dest.view(-1).view(torch.uint8)
            elif own is not None:
                kept = own[e.offset : e.offset + e.nbytes]
            else:
                kept = torch.empty(e.nbytes, dtype=torch.uint8, device=self.device)
            if exit_after and report.buckets >= int(exit_after) and faults.first_time("sync.exit_after_bucket"):
                os._exit(1)  # fault injection: this process dies mid-sync
            if corrupt and e.name == corrupt:
                self.copies.copy(kept, src, False)
                kept[0] ^= 0xFF  # fault injection: one byte flipped on the way
                got = self.copies.checksum(kept) if e.checksum is not None else None
            else:
                got = self.copies.copy(kept, src, e.checksum is not None)
            self._take(e, got, kept, dest, out, report, digest, state)
        return out

    def _drain(self) -> None:
        """Receive and drop the rest of a sync (the consumer stopped early), so the sender is not left waiting."""
        while True:
            header = Header.decode(self.group.recv_bytes())
            if header.last:
                return
            if header.shared_offset < 0 or self._shared is None:
                payload = self._buffer(header.nbytes)
                for e in header.entries:
                    self.group.broadcast_data(payload[e.offset : e.offset + e.nbytes])
            if header.barrier:
                self.group.barrier()

    def close(self) -> None:
        self.group.close()
        if self._segment is not None:
            self._segment.close()
        self._segment = None
        self._shared = None
