"""The entry points as a user meets them: real subprocesses, exit codes and messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run(cmd: str, *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run([str(BIN / cmd), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def test_plan_prints_a_memory_verdict_per_device():
    r = run("rlhf-plan", "+recipe=grpo_llama3_8b", "trainer.zero_stage=3")
    assert r.returncode == 0, r.stderr
    assert "memory per device" in r.stdout and "verdict: fits" in r.stdout
    assert "4 engine(s) x TP 2" in r.stdout


def test_plan_json():
    r = run("rlhf-plan", "--json", "+recipe=ppo_llama3_70b")
    data = json.loads(r.stdout)
    assert data["fits"] is True and set(data["roles"]) == {"policy", "reference", "critic", "reward", "rollout"}


@pytest.mark.parametrize(
    ("override", "needle"),
    [("trainer.zero_stage=7", "trainer.zero_stage=7"), ("trainer.no_such_key=1", "trainer.no_such_key")],
)
def test_run_rejects_bad_override_with_one_message_and_no_traceback(tmp_path, override, needle):
    r = run("rlhf-run", "+recipe=grpo_llama3_8b", override, cwd=tmp_path)
    assert r.returncode != 0
    assert needle in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "mlflow.db").exists()  # nothing started
    assert not (tmp_path / "outputs").exists()  # and no run folder for a run that never started


def test_run_reports_every_problem_of_a_bad_config(tmp_path):
    r = run("rlhf-run", "+recipe=grpo_llama3_8b", "trainer.zero_stage=7", "trainer.global_batch=1000", cwd=tmp_path)
    assert r.returncode == 2
    assert "3 problem(s)" in r.stderr and "trainer.global_batch=1000" in r.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_run_refused_by_the_preflight_leaves_no_run_folder(tmp_path):
    dead = "reward.urls=['http://127.0.0.1:9/get_reward']"  # the discard port: nothing listens there
    r = run("rlhf-run", "+recipe=grpo_tiny_cpu", "reward.verifier=", dead, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "reward.urls[0]" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


def test_multirun_validates_every_job_before_any_starts(tmp_path):
    r = run("rlhf-run", "-m", "+recipe=grpo_llama3_8b", "trainer.zero_stage=2,7", "seed=1,2", cwd=tmp_path)
    assert r.returncode == 2
    assert "2 of 4 sweep job(s) are invalid" in r.stderr
    assert "trainer.zero_stage=7 seed=1" in r.stderr and "trainer.zero_stage=7 seed=2" in r.stderr
    assert not (tmp_path / "multirun").exists()


def test_hydra_flags_keep_working(tmp_path):
    r = run("rlhf-run", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "algorithm:" in r.stdout and "hardware:" in r.stdout
    r = run("rlhf-run", "+recipe=grpo_llama3_8b", "--cfg", "job", cwd=tmp_path)
    assert r.returncode == 0 and "zero_stage: 3" in r.stdout


def test_recipes_ls_show_cp_validate(tmp_path):
    ls = run("rlhf-recipes", "ls")
    assert ls.returncode == 0
    row = next(line for line in ls.stdout.splitlines() if line.startswith("ppo_llama3_70b "))
    assert "ppo" in row and "llama3_70b" in row and "6x8xa100_80g" in row and "split" in row
    show = run("rlhf-recipes", "show", "grpo_llama3_8b")
    assert "estimator: group_norm" in show.stdout
    cp = run("rlhf-recipes", "cp", "grpo_llama3_8b", str(tmp_path / "mine.yaml"))
    assert cp.returncode == 0 and (tmp_path / "mine.yaml").is_file()
    plan = run("rlhf-plan", f"+recipe={tmp_path / 'mine.yaml'}")
    assert plan.returncode == 0 and "plan for mine" in plan.stdout
    assert run("rlhf-recipes", "show", "nope").returncode == 2
    v = run("rlhf-recipes", "validate", "grpo_llama3_8b")
    assert v.returncode == 0 and "1 of 1 recipe(s) valid" in v.stdout


def test_explain_prints_type_default_domain_and_doc_from_the_schema():
    r = run("rlhf-recipes", "explain", "rollout.top_p", "--recipe", "grpo_tiny_cpu")
    assert r.returncode == 0, r.stderr
    assert "rollout.top_p: float = 1.0" in r.stdout
    assert "allowed: in (0, 1]" in r.stdout and "nucleus" in r.stdout and "in grpo_tiny_cpu: 1.0" in r.stdout


def test_explain_unknown_key_suggests_close_ones():
    r = run("rlhf-recipes", "explain", "trainer.lrr")
    assert r.returncode == 2 and "did you mean trainer.lr" in r.stderr


def test_validate_all_reports_values_left_to_the_command_line_as_needed_not_invalid():
    v = run("rlhf-recipes", "validate", "all")
    assert v.returncode == 0, v.stdout
    line = next(s for s in v.stdout.splitlines() if s.startswith("ok    opd_tiny_cpu"))
    assert "needs teacher.model_path" in line
    assert "FAIL" not in v.stdout and "with values to give on the command line" in v.stdout


def test_a_value_left_to_the_command_line_is_named_by_run_and_plan_without_a_traceback(tmp_path):
    for cmd in ("rlhf-plan", "rlhf-run"):
        r = run(cmd, "+recipe=opd_tiny_cpu", cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stderr)
        assert "teacher.model_path='???': required: give it on the command line" in r.stderr
        assert "Traceback" not in r.stderr + r.stdout
    given = run("rlhf-plan", "+recipe=opd_tiny_cpu", f"teacher.model_path={tmp_path}", cwd=tmp_path)
    assert "teacher.model_path='???'" not in given.stderr  # the command line fills it; other checks then apply


def test_a_user_recipe_file_can_leave_a_value_to_the_command_line(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("# @package _global_\n# mine\ndefaults:\n  - override /algorithm: grpo\n")
    recipe.write_text(recipe.read_text() + "reward:\n  verifier: ???\n")
    r = run("rlhf-plan", f"+recipe={recipe}", cwd=tmp_path)
    assert r.returncode == 2 and "reward.verifier='???'" in r.stderr  # over the schema default "", not lost
    given = run("rlhf-plan", f"+recipe={recipe}", "reward.verifier=exact", cwd=tmp_path)
    assert "reward.verifier" not in given.stderr  # given on the command line: no longer missing
