"""Shared set-up of the pipeline tests: one private Ray cluster for the session, tiny specs."""

from __future__ import annotations

import pytest
from tiny_shapes import TWO_RANKS  # a module of its own: `conftest` names several files in this suite

from rlhf.spec.build import load_spec


def make_tiny_spec(recipe: str, *overrides: str):
    return load_spec([f"+recipe={recipe}", *TWO_RANKS, *overrides])


@pytest.fixture
def tiny_spec():
    """``tiny_spec(recipe, *overrides)``: the recipe with 2 ranks, few steps' batch sizes, quiet logging."""
    return make_tiny_spec


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
