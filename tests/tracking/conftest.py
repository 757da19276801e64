"""Shared set-up of the tracker tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """One MLflow sqlite store per test module (making a store's tables takes seconds)."""
    return tmp_path_factory.mktemp("mlflow") / "mlflow.db"
