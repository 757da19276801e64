"""``ray.address``: a cluster on this machine is joined on loopback, a missing one is named before anything starts,
and a run whose attach hangs (Ray retries for minutes) still stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until

from rlhf.planning.preflight.ray_address import check_ray_address, host_port, is_loopback_address


def test_host_port_reads_a_gcs_address_and_leaves_auto_and_ray_client_to_ray():
    assert host_port("127.0.0.1:6379") == ("127.0.0.1", 6379)
    assert host_port("[::1]:6379") == ("::1", 6379)
    assert host_port("head.example:6380") == ("head.example", 6380)
    assert host_port("auto") is None and host_port("ray://head:10001") is None and host_port("head") is None


def test_loopback_addresses_are_told_apart_from_remote_ones():
    assert is_loopback_address("127.0.0.1:6379") and is_loopback_address("localhost:1")
    assert is_loopback_address("[::1]:6379")
    assert not is_loopback_address("10.0.0.5:6379") and not is_loopback_address("auto")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_missing_local_cluster_is_named_with_the_ray_start_command():
    port = _free_port()
    (finding,) = check_ray_address(f"127.0.0.1:{port}")
    assert finding.key == "ray.address" and "connection refused" in finding.problem
    assert f"ray start --head --node-ip-address=127.0.0.1 --port={port}" in finding.fix


def test_a_listening_address_passes_the_check():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert check_ray_address(f"127.0.0.1:{s.getsockname()[1]}") == []


@pytest.fixture
def silent_listener():
    """A port that accepts connections and never answers: Ray's connect to it retries for minutes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield server.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    server.close()


@pytest.mark.ray
def test_sigterm_while_the_data_builds_and_ray_attaches_stops_the_run_at_step_0(silent_listener, tmp_path):
    rlhf_run = Path(sys.executable).with_name("rlhf-run")
    cmd = [str(rlhf_run), "+recipe=grpo_tiny_cpu", f"ray.address=127.0.0.1:{silent_listener}", "logging.trackers=[]"]
    env = {**os.environ, "RLHF_OUTPUTS": str(tmp_path)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    attaching = lambda: any("attaching to the Ray cluster" in line for line in lines)  # noqa: E731
    wait_until(attaching, "the attach line", 240, alive=lambda: proc.poll() is None)
    # At once: the data still builds beside the attach (CI's loaded machine sent it there, before the handlers
    # were installed, and the process died of the signal); the run then waits in Ray's connect until it stops.
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=ceiling(60))
    finally:
        proc.kill()
    reader.join(ceiling(5))
    out = "".join(lines)
    assert rc == 130, out[-3000:]
    assert "interrupted at step 0; no checkpoint saved" in out, out[-3000:]
