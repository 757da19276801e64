"""Shared set-up of the pipeline tests: tiny specs (the session's Ray cluster is tests/conftest.py's ray_cluster)."""

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
