"""One private Ray cluster for the compat tests that need one (tests/pipelines/conftest.py's pattern)."""

from __future__ import annotations

import pytest


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
