"""Shared set-up of the pipeline tests: tiny specs (the session's Ray cluster is tests/conftest.py's ray_cluster)."""

from __future__ import annotations

import pytest

from rlhf.spec.build import load_spec

# Two data-parallel ranks on the 2-core machine, gradient accumulation 2, a few steps.
TWO_RANKS = [
    "hardware.devices_per_node=2",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=8",
    "logging.mlflow=false",
    "logging.progress=false",
]


def make_tiny_spec(recipe: str, *overrides: str):
    return load_spec([f"+recipe={recipe}", *TWO_RANKS, *overrides])


@pytest.fixture
def tiny_spec():
    """``tiny_spec(recipe, *overrides)``: the recipe with 2 ranks, few steps' batch sizes, quiet logging."""
    return make_tiny_spec
