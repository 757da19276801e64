"""Test-wide set-up, before any test module imports ray.

- Ray's public switch that keeps the clusters the tests start (private clusters, ray.cluster_utils nodes in
  subprocesses) on 127.0.0.1. Ray reads it once, at import, so this is the earliest safe place for the test session
  (rlhf-run sets it itself before it imports ray).
- Helpers shared by test folders (tests/sockets_helper.py) importable from every test.
- ``ray_cluster``: one private Ray cluster for the session (4 CPUs, 127.0.0.1), shared by every folder's tests
  that need one (tests/launch/test_realize.py keeps its own, module-scoped, for its own teardown).
"""

import os
import sys

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from rlhf.launch.cluster import start_or_attach
    from rlhf.spec.schema import RaySpec

    started = not ray.is_initialized()
    start_or_attach(RaySpec(num_cpus=4))
    yield
    if started:
        ray.shutdown()
