"""``ray.address``: a cluster to attach to that is not there fails here in a second, naming the fix, instead of in
Ray's connect, which retries for a minute (refused) or for many minutes (an address that drops packets)."""

from __future__ import annotations

import socket

from rlhf.planning.preflight.findings import Finding

CONNECT_TIMEOUT_S = 2.0


def host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a GCS address (``ray.address``), or None for "auto" and Ray Client's ``ray://`` form."""
    if not address or address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def is_loopback_address(address: str) -> bool:
    hp = host_port(address)
    return hp is not None and (hp[0] == "localhost" or hp[0] == "::1" or hp[0].startswith("127."))


def check_ray_address(address: str) -> list[Finding]:
    hp = host_port(address)
    if hp is None:  # "auto" and ray:// are resolved by Ray itself
        return []
    host, port = hp
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return []
    except OSError as e:
        why = "connection refused" if isinstance(e, ConnectionRefusedError) else (e.strerror or type(e).__name__)
    if is_loopback_address(address):
        fix = (
            f"start one on this machine with `ray start --head --node-ip-address=127.0.0.1 --port={port}`, "
            "or leave ray.address empty for a private cluster"
        )
    else:
        fix = f"check that Ray's head node runs at {host} and its GCS port ({port}) is open to this machine"
    return [Finding("ray.address", address, f"no Ray cluster answers at {host}:{port} ({why})", fix)]
