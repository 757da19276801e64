"""Ports for rendezvous stores that bind later (seconds later, maybe in another process): the Ray executor's rank
0 and the local executor's one rank."""

from __future__ import annotations

import socket


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range, 32768 by
    default); 49152 (IANA's) where it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on ``host`` for a rendezvous that binds it later (seconds later, in another process).

    Below the ephemeral range: a port the kernel hands out for ``bind(0)`` or as an outgoing connection's source
    port can be taken in that gap by any of the cluster's processes (seen in the suite: rank 0's store failed with
    EADDRINUSE); ports below the range are taken only by a process that names them."""
    import random

    low = _ephemeral_low()
    if low > 20000:
        for port in random.sample(range(20000, low), min(64, low - 20000)):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
