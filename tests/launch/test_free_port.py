"""The rendezvous port the driver picks for a role group (or the local executor for its one rank) lies below the
kernel's ephemeral range, where no process's bind(0) or outgoing connection can take it in the seconds before rank 0
binds it."""

from __future__ import annotations

import socket

from rlhf.launch import ports


def test_the_rendezvous_port_is_free_and_below_the_ephemeral_range():
    low = ports._ephemeral_low()
    drawn = {ports.free_port() for _ in range(20)}
    for port in drawn:
        assert 20000 <= port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))  # still free: nothing was left bound
    assert len(drawn) > 1  # drawn at random, so two groups started together do not pick the same one


def test_a_port_taken_below_the_range_is_skipped(monkeypatch):
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        # the only candidate is the taken port: the search falls back to one the kernel gives
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 20001)
        monkeypatch.setattr("random.sample", lambda population, k: [port])
        got = ports.free_port()
        assert got != port
    finally:
        taken.close()
