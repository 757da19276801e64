"""vLLM's own keys moved from ``rollout.*`` to ``rollout.vllm.*``: every old spelling -- on the command line, added
with ``+``, or in a recipe file -- fails before anything starts, naming the key it moved to."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ceilings import ceiling

from rlhf.cli.common import explain_compose_error
from rlhf.spec.build import compose, load_spec
from rlhf.spec.rollout_backend_rules import moved_keys
from rlhf.spec.validate import SpecInvalid

MOVED_KEYS = moved_keys()

VALUES = {"gpu_memory_utilization": "0.5", "enforce_eager": "true", "enable_prefix_caching": "true"}


def _value(old: str) -> str:
    return VALUES.get(old.rsplit(".", 1)[1], "8")


def _compose_error(overrides: list[str]) -> str:
    with pytest.raises(Exception) as e:
        compose(overrides)
    return explain_compose_error(e.value)


@pytest.mark.parametrize("old", sorted(MOVED_KEYS))
def test_an_old_key_on_the_command_line_names_its_new_key(old):
    message = _compose_error(["+recipe=grpo_tiny_cpu", f"{old}={_value(old)}"])
    assert f"{old}: no such config key; it moved to {MOVED_KEYS[old]}" in message


@pytest.mark.parametrize("old", sorted(MOVED_KEYS))
def test_an_old_key_added_with_plus_names_its_new_key(old):
    with pytest.raises(SpecInvalid) as e:
        load_spec(["+recipe=grpo_tiny_cpu", f"+{old}={_value(old)}"])
    assert f"{old}=" in str(e.value) and f"no such config key; moved to {MOVED_KEYS[old]}" in str(e.value)


def test_an_unknown_key_added_with_plus_lists_the_sections_keys():
    with pytest.raises(SpecInvalid, match=r"rollout\.foo=1: no such config key; valid: async_mode, backend, "):
        load_spec(["+recipe=grpo_tiny_cpu", "+rollout.foo=1"])


def test_an_old_key_in_a_recipe_file_names_its_new_key(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "old.yaml").write_text("# @package _global_\nrollout:\n  gpu_memory_utilization: 0.6\n")
    message = _compose_error([f"hydra.searchpath=[file://{tmp_path}]", "+recipe=old"])
    assert "In 'recipe/old'" in message
    assert "rollout.gpu_memory_utilization: no such config key; it moved to rollout.vllm.gpu_memory_utilization" in (
        message
    )


def test_rlhf_run_refuses_an_old_key_with_exit_2_and_starts_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf.cli.run", "+recipe=grpo_tiny_cpu", "rollout.gpu_memory_utilization=0.5"],
        capture_output=True,
        text=True,
        timeout=ceiling(300),
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "it moved to rollout.vllm.gpu_memory_utilization" in proc.stderr
    assert not list(tmp_path.iterdir())  # no run folder, no outputs/
