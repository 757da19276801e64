"""rlhf.pipelines.run_command: a changed command for a run folder is staged until its attempt has started."""

from __future__ import annotations

import json

from rlhf.pipelines.run_command import COMMAND_FILE, NEXT_COMMAND_FILE, adopt_staged, read, record


def test_the_first_command_is_the_runs_and_a_changed_one_waits_for_its_attempt_to_start(tmp_path):
    first = {"argv": ["+recipe=grpo_tiny_cpu"], "cwd": "/w"}
    assert record(tmp_path, first) is False and read(tmp_path) == first
    changed = {"argv": ["+recipe=grpo_tiny_cpu", "model=small"], "cwd": "/w"}
    assert record(tmp_path, changed) is True
    assert read(tmp_path) == first  # an attempt that fails before it starts leaves the run's command as it was
    assert json.loads((tmp_path / NEXT_COMMAND_FILE).read_text()) == changed
    assert adopt_staged(tmp_path) is True and read(tmp_path) == changed  # it started: the command is the run's
    assert not (tmp_path / NEXT_COMMAND_FILE).exists() and adopt_staged(tmp_path) is False


def test_the_same_command_again_drops_a_stale_staged_one(tmp_path):
    first = {"argv": ["+recipe=grpo_tiny_cpu"], "cwd": "/w"}
    record(tmp_path, first)
    record(tmp_path, {"argv": ["+recipe=grpo_tiny_cpu", "model=small"], "cwd": "/w"})  # that attempt failed
    assert record(tmp_path, first) is False
    assert not (tmp_path / NEXT_COMMAND_FILE).exists() and read(tmp_path) == first
    assert (tmp_path / COMMAND_FILE).is_file()
