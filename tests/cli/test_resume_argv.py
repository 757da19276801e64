"""rlhf-run --resume rebuilds the run's command (rlhf.cli.resume.resume_argv): a checkpoint picked by hand in an
earlier attempt (checkpoint.resume=PATH) does not pin every later resume to it."""

from __future__ import annotations

import json

from rlhf.cli.resume import COMMAND_FILE, resume_argv
from rlhf.run_files.checkpoint import DRIVER_STATE


def _run_folder(tmp_path, argv, own_steps=()):
    run = tmp_path / "run"
    run.mkdir()
    (run / COMMAND_FILE).write_text(json.dumps({"argv": argv, "cwd": str(tmp_path)}))
    for step in own_steps:
        ck = run / "checkpoints" / f"step{step:08d}"
        ck.mkdir(parents=True)
        (ck / DRIVER_STATE).write_text(json.dumps({"step": step}))
    return run


def test_a_checkpoint_picked_in_an_earlier_attempt_gives_way_to_the_runs_newest(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    pick = f"checkpoint.resume={tmp_path}/run/checkpoints/step00000004"
    run = _run_folder(tmp_path, ["+recipe=grpo_tiny_cpu", pick], own_steps=(4, 8))
    argv = resume_argv(["--resume", str(run)])
    assert pick not in argv and argv[0] == "+recipe=grpo_tiny_cpu" and argv[-1] == f"hydra.run.dir={run.resolve()}"
    assert f"continuing from the run's newest, {run / 'checkpoints' / 'step00000008'}" in capsys.readouterr().err
    again = resume_argv(["--resume", str(run), pick])  # picked again on this command line: it applies now
    assert again.count(pick) == 1


def test_a_picked_checkpoint_is_kept_while_the_run_has_none_of_its_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pick = "checkpoint.resume=/elsewhere/step00000010"  # where the run starts, until it saves its own
    run = _run_folder(tmp_path, ["+recipe=grpo_tiny_cpu", pick])
    assert pick in resume_argv(["--resume", str(run)])
