"""The seed workflow as the README gives it: SFT, then a reward model from the SFT model, then PPO from the SFT
model with that reward model (its critic starts from the reward model), each stage reading the previous output.
The stages run through ``rlhf.run`` in this process (the same compose, validation, preflight and local executor as
``rlhf-run``; tests/docs/test_readme_commands.py runs the README's commands themselves, each in a process)."""

from __future__ import annotations

import json

import pytest

import rlhf
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow


def test_sft_then_rm_then_ppo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the MLflow store of each stage: ./mlflow.db
    quiet = "logging.progress=false"
    sft = rlhf.run("sft_tiny_cpu", "trainer.max_steps=6", quiet, run_dir=tmp_path / "runs/sft")
    assert sft.model_dir == tmp_path / "runs/sft/model" and (sft.model_dir / "config.json").is_file()
    rm = rlhf.run(
        "rm_tiny_cpu",
        "model.make_local=false",
        f"model.path={sft.model_dir}",
        "trainer.max_steps=6",
        quiet,
        run_dir=tmp_path / "runs/rm",
    )
    rm_config = json.loads((rm.model_dir / "config.json").read_text())
    assert "mean" in rm_config and "std" in rm_config  # for reward.normalize in the next stage
    ppo = rlhf.run(
        "ppo_tiny_cpu",
        "model.make_local=false",
        f"model.path={sft.model_dir}",
        "reward.verifier=",
        f"reward.model_path={rm.model_dir}",
        "reward.normalize=true",
        "trainer.max_steps=2",
        quiet,
        run_dir=tmp_path / "runs/ppo",
    )
    assert ppo.summary["steps"] == 2
    steps = [r for r in read_metrics(ppo.run_dir) if "train/critic_loss" in r]
    assert len(steps) == 2 and all(r["train/reward"] == r["train/reward"] for r in steps)
