"""Which TCP sockets a process listens on, from /proc (Linux): used by the loopback-only tests."""

from __future__ import annotations

import os
import socket
import struct


def _addr(hex_addr: str) -> str:
    ip, _ = hex_addr.split(":")
    if len(ip) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(ip, 16)))
    raw = bytes.fromhex(ip)
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except (FileNotFoundError, PermissionError):
        pass
    return out


def listening_sockets_of(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by ``pid``."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:
                addr, port = parts[1].split(":")
                found.append((_addr(parts[1]), int(port, 16)))
    return found
