"""The weight-sync transport between real processes (gloo over loopback, a real shared-memory segment), without
Ray: buckets arrive bit for bit, checksums and digests agree, a flipped byte is named, nothing listens beyond
loopback and no segment is left in /dev/shm."""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback

import pytest
import torch
from sockets_helper import listening_sockets_of

from rlhf.backends.weight_sync.group import GroupConfig, listen_socket
from rlhf.backends.weight_sync.receiver import WeightReceiver
from rlhf.backends.weight_sync.sender import WeightSender
from rlhf.backends.weight_sync.wire import Header, checksum, pack

TIMEOUT = 60.0
LISTENING: list[tuple[str, int]] = []
# Receivers are processes forked from one server that imported torch and the receiver once (about 1 s each of a
# spawned process's start, 17 times in this module); the server itself started no thread of torch's.
CTX = mp.get_context("forkserver")
CTX.set_forkserver_preload(["torch", "rlhf.backends.weight_sync.receiver", __name__])


def _weights(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        ("embed.weight", torch.randn(300, 64, generator=g)),
        ("layer.0.weight", torch.randn(64, 64, generator=g).to(torch.bfloat16)),
        ("layer.0.bias", torch.randn(7, generator=g)),  # 28 bytes: a tail shorter than one word
        ("odd.weight", torch.randn(3, 5, generator=g).to(torch.bfloat16)),
        ("head.weight", torch.randn(300, 64, generator=g)),
    ]


def _tensor(packed) -> torch.Tensor:
    dtype, shape, raw = packed
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(getattr(torch, dtype.split(".")[1])).view(shape)


def _buckets(weights, per_bucket=2):
    return [weights[i : i + per_bucket] for i in range(0, len(weights), per_bucket)]


def _raw(t: torch.Tensor) -> tuple:
    # raw bytes, not tensors: torch would share tensors through fds that die with this process
    return (str(t.dtype), tuple(t.shape), t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())


def _receiver_main(cfg: dict, route: str, stable: bool, versions: int, out, env: dict, direct: bool) -> None:
    os.environ.update(env)
    try:
        r = WeightReceiver(GroupConfig.from_dict(cfg), device=torch.device("cpu"), route=route, stable=stable)
        results = []
        params = {n: torch.zeros_like(t) for n, t in _weights()}  # an engine's own tensors, written in place
        for v in range(1, versions + 1):
            into = (lambda e: params.get(e.name)) if direct else None
            got = {n: _raw(t) for n, t in r.pull(v, into=into)}
            if direct:
                got.update({n: _raw(t) for n, t in params.items() if n not in got})
            results.append((got, r.report.to_dict()))
        r.close()
        out.put(("ok", cfg["rank"], results))
    except BaseException as e:  # noqa: BLE001 - reported to the test process
        out.put(("error", cfg["rank"], f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _run(
    routes: list[str],
    *,
    versions: int = 1,
    env: dict | None = None,
    stable: bool = False,
    shared: bool = True,
    direct: bool = False,
):
    # This process may already listen elsewhere (a Ray driver, other tests' servers): only the group's count.
    before = set(listening_sockets_of(os.getpid()))
    listen = listen_socket("127.0.0.1")
    port = listen.getsockname()[1]
    world = 1 + len(routes)
    data_ranks = (0,) + tuple(i + 1 for i, r in enumerate(routes) if r == "broadcast")
    base = GroupConfig("127.0.0.1", port, world, 0, "gloo", data_ranks, TIMEOUT)
    ctx = CTX
    out = ctx.Queue()
    procs = []
    for i, route in enumerate(routes):
        cfg = GroupConfig("127.0.0.1", port, world, i + 1, "gloo", data_ranks, TIMEOUT).to_dict()
        p = ctx.Process(target=_receiver_main, args=(cfg, route, stable, versions, out, env or {}, direct))
        p.start()
        procs.append(p)
    uses_shm = shared and "shared_memory" in routes
    sender = WeightSender(
        base, listen, device=torch.device("cpu"), capacity=1 << 20, shared="host" if uses_shm else None
    )
    LISTENING[:] = [s for s in listening_sockets_of(os.getpid()) if s not in before]  # the store's, gloo's
    reports = []
    try:
        for v in range(1, versions + 1):
            reports.append(sender.push(_buckets(_weights(v)), v))
    finally:
        sender.close()
    results = [out.get(timeout=TIMEOUT) for _ in routes]
    for p in procs:
        p.join(timeout=TIMEOUT)
    return reports, sorted(results, key=lambda r: r[1])


def test_checksum_changes_with_any_byte_and_agrees_across_copies():
    data = torch.randint(0, 255, (10_003,), dtype=torch.uint8)
    base = checksum(data)
    assert checksum(data.clone()) == base
    for i in (0, 4095, 4096, 8000, 10_002):  # first word, row edge, next row, word tail, byte tail
        d = data.clone()
        d[i] ^= 1
        assert checksum(d) != base, i
    swapped = torch.cat([data[4096:8192], data[:4096], data[8192:]])  # two rows exchanged
    assert checksum(swapped) != base


def test_header_round_trips_and_pack_keeps_raw_bytes():
    weights = _weights()
    buf = torch.empty(1 << 20, dtype=torch.uint8)
    entries = pack(weights, buf, with_checksums=True)
    h = Header(version=3, entries=entries, nbytes=entries[-1].offset + entries[-1].nbytes, barrier=True)
    back = Header.decode(h.encode())
    assert back == h
    for (name, t), e in zip(weights, back.entries, strict=True):
        assert e.offset % 64 == 0 and e.name == name
        assert torch.equal(e.view(buf), t)  # bf16 included


@pytest.mark.parametrize("direct", [False, True], ids=["yielded", "into-parameters"])
@pytest.mark.parametrize("routes", [["broadcast"], ["shared_memory"], ["broadcast", "shared_memory", "broadcast"]])
def test_every_route_delivers_every_tensor_bit_for_bit(routes, direct):
    reports, results = _run(routes, versions=2, direct=direct)
    for status, rank, payload in results:
        assert status == "ok", payload
        for v, (got, rep) in enumerate(payload, start=1):
            want = dict(_weights(v))
            assert sorted(got) == sorted(want)
            for name, t in want.items():
                assert torch.equal(_tensor(got[name]), t), (rank, v, name)
            assert rep["digest"] == reports[v - 1].digest and rep["first_mismatch"] is None
            assert rep["tensors"] == len(want) and rep["buckets"] == 3
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"rlhf-sync-{os.getpid()}-")]


def test_stable_tensors_outlive_the_next_bucket():
    # vLLM's layer-wise loader keeps tensors until a layer is complete: with stable=True they must stay intact.
    _, results = _run(["shared_memory", "broadcast"], stable=True)
    for status, _, payload in results:
        assert status == "ok", payload
        got, _ = payload[0]
        for name, t in _weights(1):
            assert torch.equal(_tensor(got[name]), t)


def test_a_flipped_byte_is_named_by_the_receiver():
    _, results = _run(["broadcast", "shared_memory"], env={"RLHF_FAULTS": "sync.corrupt:layer.0.weight"})
    for status, _, payload in results:
        assert status == "error"
        assert "ChecksumMismatch" in payload and "layer.0.weight" in payload


def test_the_group_listens_on_loopback_only():
    _, results = _run(["broadcast", "shared_memory"])
    assert all(status == "ok" for status, _, _ in results)
    assert LISTENING, "the sender should be listening (the store) while the group is up"
    assert all(addr.startswith("127.") for addr, _ in LISTENING), LISTENING
