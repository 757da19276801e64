"""Shared set-up of the data tests: the project's byte-level tokenizer, tiny specs, files written on the fly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rlhf.models.tokenizer import byte_level_tokenizer
from rlhf.spec.schema import AlgorithmSpec, DataSpec, ExperimentSpec, RolloutSpec


@pytest.fixture(scope="session")
def tokenizer():
    return byte_level_tokenizer()


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., str]:
    """``write_jsonl(rows, name="data.jsonl") -> path``: one JSON object per line."""

    def write(rows: list[dict], name: str = "data.jsonl") -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    return write


def make_spec(family: str = "rl", max_new_tokens: int = 8, **data) -> ExperimentSpec:
    """A spec with only the data section (and the family / max_new_tokens the builders read) set."""
    return ExperimentSpec(
        algorithm=AlgorithmSpec(family=family),
        rollout=RolloutSpec(max_new_tokens=max_new_tokens),
        data=DataSpec(**data),
    )


@pytest.fixture
def spec() -> Callable[..., ExperimentSpec]:
    return make_spec
