"""The seed workflow as the README gives it: SFT, then a reward model from the SFT model, then PPO from the SFT
model with that reward model (its critic starts from the reward model), each stage reading the previous output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = pytest.mark.slow


def rlhf_run(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlhf.cli.run", *overrides, "logging.progress=false"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=ceiling(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "executor: local" in done.stderr  # each stage one process, as the README's commands run it
    return done


def test_sft_then_rm_then_ppo(tmp_path):
    rlhf_run(tmp_path, "+recipe=sft_tiny_cpu", "hydra.run.dir=runs/sft", "trainer.max_steps=6")
    sft = tmp_path / "runs/sft/model"
    assert (sft / "config.json").is_file()
    rlhf_run(
        tmp_path,
        "+recipe=rm_tiny_cpu",
        "model.make_local=false",
        "model.path=runs/sft/model",
        "hydra.run.dir=runs/rm",
        "trainer.max_steps=6",
    )
    import json

    rm_config = json.loads((tmp_path / "runs/rm/model/config.json").read_text())
    assert "mean" in rm_config and "std" in rm_config  # for reward.normalize in the next stage
    done = rlhf_run(
        tmp_path,
        "+recipe=ppo_tiny_cpu",
        "model.make_local=false",
        "model.path=runs/sft/model",
        "reward.verifier=",
        "reward.model_path=runs/rm/model",
        "reward.normalize=true",
        "hydra.run.dir=runs/ppo",
        "trainer.max_steps=2",
    )
    assert "done: rl 2 steps" in done.stderr
    rows = [json.loads(line) for line in (tmp_path / "runs/ppo/metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/critic_loss" in r]
    assert len(steps) == 2 and all(r["train/reward"] == r["train/reward"] for r in steps)
