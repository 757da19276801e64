"""Finding 5 of issue 17 (the CUDA IPC race): on the shared-memory route every receiver copies a bucket out of the
shared half into memory it keeps, takes the checksum on that copy, waits for its device stream, and only then
acknowledges, after which the sender repacks the half. On CPU copies are synchronous, so the test records the order
(copy, settle, acknowledge) and which bytes the checksum read, with a real sender and receiver over gloo."""

from __future__ import annotations

import threading

import torch
from ceilings import ceiling

from rlhf.backends.weight_sync.group import GroupConfig, listen_socket
from rlhf.backends.weight_sync.receiver import WeightReceiver
from rlhf.backends.weight_sync.sender import WeightSender


def _weights(v: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(v)
    return [(f"w{i}", torch.randn(64, 64, generator=g)) for i in range(6)]  # 16 KiB each


def test_copies_are_settled_and_checksummed_on_the_kept_bytes_before_the_acknowledgement():
    from rlhf.backends.weight_sync.receiver import DeviceCopies

    class _Recorder(DeviceCopies):
        def __init__(self, log: list) -> None:
            super().__init__(torch.device("cpu"))
            self.log = log

        def copy(self, dst, src, with_checksum):
            self.log.append(("copy", dst.data_ptr(), with_checksum))
            return super().copy(dst, src, with_checksum)

        def settle(self):
            self.log.append(("settle",))

    listen = listen_socket("127.0.0.1")
    port = listen.getsockname()[1]
    cfg0 = GroupConfig("127.0.0.1", port, 2, 0, "gloo", (0,), 60.0)
    cfg1 = GroupConfig("127.0.0.1", port, 2, 1, "gloo", (0,), 60.0)
    errors: list = []

    def send() -> None:
        try:
            # a buffer of two halves of ~40 KiB: six tensors go in three chunks, each half reused
            sender = WeightSender(cfg0, listen, device=torch.device("cpu"), capacity=40_000, shared="host")
            for v in (1, 2):
                buckets = [_weights(v)[i : i + 2] for i in range(0, 6, 2)]
                sender.push(buckets, v)
            sender.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    thread = threading.Thread(target=send)
    thread.start()
    receiver = WeightReceiver(cfg1, device=torch.device("cpu"), route="shared_memory", stable=True)
    log: list = []
    receiver.copies = _Recorder(log)
    barrier = receiver.group.barrier
    receiver.group.barrier = lambda: (log.append(("ack",)), barrier())[1]
    for v in (1, 2):
        got = list(receiver.pull(v))
        kept = {t.data_ptr() for _, t in got}
        checksummed = {ptr for kind, ptr, checked in (e for e in log if e[0] == "copy") if checked}
        assert kept <= checksummed  # the checksum read the bytes the engine keeps, not the shared half
        for name, t in got:
            assert torch.equal(t, dict(_weights(v))[name])
        assert receiver.report.first_mismatch is None
    thread.join(timeout=ceiling(60))
    receiver.close()
    assert not errors, errors
    # every acknowledgement of a shared bucket comes after its copies have settled
    events = [e[0] for e in log]
    acks = [i for i, e in enumerate(events) if e == "ack"]
    assert len(acks) >= 6
    for i in acks:
        previous = [e for e in events[:i] if e in ("copy", "settle", "ack")]
        last_copy = max(j for j, e in enumerate(previous) if e == "copy")
        assert "settle" in previous[last_copy:], events
