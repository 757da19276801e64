"""A user's own config folder and primary config reach Hydra's search path in every entry point: rlhf-run,
rlhf-plan and rlhf-recipes see the same groups, recipes and primary configs (-cd, -cn, hydra.searchpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

BIN = Path(sys.executable).parent

MY_MODEL = """\
# a wider tiny model, kept in my own config folder
defaults:
  - tiny
  - _self_
name: my_model
hidden_size: 192
"""
MY_ALGO = """\
# RLOO with my KL coefficient
defaults:
  - rloo
  - _self_
name: my_algo
kl: {coef: 0.002}
"""
MY_RECIPE = """\
# @package _global_
# my recipe, in my config folder's recipe/
defaults:
  - override /algorithm: my_algo
  - override /model: my_model
  - override /hardware: cpu
  - override /rollout: hf
  - override /trainer: cpu
data: {train_files: [builtin:arith], label_key: label, max_len: 96}
reward: {verifier: exact}
rollout: {prompts_per_step: 4, samples_per_prompt: 4, max_new_tokens: 8}
trainer: {global_batch: 16, micro_batch_per_device: 8}
"""
MY_PRIMARY = """\
# my primary config: rlhf's shipped one, a recipe, my model, my values
defaults:
  - config
  - recipe: grpo_tiny_cpu
  - override model: my_model
  - _self_
seed: 7
"""


@pytest.fixture
def my_conf(tmp_path: Path) -> Path:
    d = tmp_path / "my_conf"
    for rel, text in {
        "model/my_model.yaml": MY_MODEL,
        "algorithm/my_algo.yaml": MY_ALGO,
        "recipe/mine.yaml": MY_RECIPE,
        "my_config.yaml": MY_PRIMARY,
    }.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def run(cmd: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [str(BIN / cmd), *args], capture_output=True, text=True, timeout=ceiling(180), cwd=cwd, env=env
    )


def test_config_dir_adds_a_model_and_an_algorithm_every_command_sees(my_conf: Path):
    cwd = my_conf.parent
    mine = ["+recipe=grpo_tiny_cpu", "model=my_model", "algorithm=my_algo"]
    r = run("rlhf-run", "-cd", "my_conf", *mine, "--cfg", "job", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "name: my_model" in r.stdout and "hidden_size: 192" in r.stdout and "name: my_algo" in r.stdout
    p = run("rlhf-plan", "--json", *mine, "--config-dir", "my_conf", cwd=cwd)  # flags after overrides too
    assert p.returncode == 0, p.stderr
    assert '"spec": "grpo_tiny_cpu"' in p.stdout and '"critic"' not in p.stdout
    v = run(
        "rlhf-recipes", "validate", "grpo_tiny_cpu", "-cd", "my_conf", "model=my_model", "algorithm=my_algo", cwd=cwd
    )
    assert v.returncode == 0 and "1 of 1 recipe(s) valid" in v.stdout, v.stdout + v.stderr
    # without the folder, the same options are unknown, and the message lists the search path
    r = run("rlhf-plan", *mine, cwd=cwd)
    assert r.returncode == 2 and "Could not find 'model/my_model'" in r.stderr and "Traceback" not in r.stderr


def test_recipes_in_the_config_folder_are_listed_validated_and_run(my_conf: Path):
    cwd = my_conf.parent
    ls = run("rlhf-recipes", "-cd", "my_conf", "ls", cwd=cwd)
    row = next(line for line in ls.stdout.splitlines() if line.startswith("mine "))
    assert "my_algo" in row and "my_model" in row and "my recipe, in my config folder" in row
    assert "grpo_tiny_cpu" in ls.stdout  # the shipped ones stay
    v = run("rlhf-recipes", "validate", "mine", "-cd", "my_conf", cwd=cwd)
    assert v.returncode == 0, v.stdout + v.stderr
    p = run("rlhf-plan", "-cd", "my_conf", "+recipe=mine", cwd=cwd)
    assert p.returncode == 0 and "plan for mine" in p.stdout, p.stderr
    r = run("rlhf-run", "-cd", "my_conf", "+recipe=mine", "--cfg", "hydra", "--resolve", cwd=cwd)
    assert r.returncode == 0 and "dir: outputs/mine/" in r.stdout, r.stderr


def test_config_name_uses_the_users_primary_config(my_conf: Path):
    cwd = my_conf.parent
    r = run("rlhf-run", "-cd", "my_conf", "-cn", "my_config", "--cfg", "job", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "seed: 7" in r.stdout and "name: my_model" in r.stdout and "recipe: grpo_tiny_cpu" in r.stdout
    p = run("rlhf-plan", "-cd", "my_conf", "-cn", "my_config", "seed=8", cwd=cwd)
    assert p.returncode == 0 and "plan for grpo_tiny_cpu" in p.stdout, p.stderr
    v = run("rlhf-recipes", "-cd", "my_conf", "-cn", "my_config", "validate", "grpo_tiny_cpu", cwd=cwd)
    assert v.returncode == 0, v.stdout + v.stderr


def test_searchpath_override_works_like_config_dir(my_conf: Path):
    cwd = my_conf.parent
    sp = f"hydra.searchpath=[file://{my_conf}]"
    p = run("rlhf-plan", "+recipe=grpo_tiny_cpu", "model=my_model", sp, cwd=cwd)
    assert p.returncode == 0, p.stderr
    r = run("rlhf-run", "+recipe=grpo_tiny_cpu", "model=my_model", sp, "--cfg", "job", cwd=cwd)
    assert r.returncode == 0 and "hidden_size: 192" in r.stdout, r.stderr


def test_a_missing_config_folder_is_named(tmp_path: Path):
    for cmd in ("rlhf-run", "rlhf-plan"):
        r = run(cmd, "-cd", "nope", "+recipe=grpo_tiny_cpu", cwd=tmp_path)
        assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr, (cmd, r.stderr)


def test_sweep_over_a_glob_of_the_users_options_is_validated_up_front(my_conf: Path):
    cwd = my_conf.parent
    r = run(
        "rlhf-run", "-m", "-cd", "my_conf", "+recipe=grpo_tiny_cpu", "model=glob(my_*)", "trainer.lr=-1,0.1", cwd=cwd
    )
    assert r.returncode == 2, r.stderr
    assert "1 of 2 sweep job(s) are invalid; none was started" in r.stderr
    assert "model=my_model trainer.lr=-1" in r.stderr and "must be > 0" in r.stderr
    assert not (cwd / "multirun").exists()
