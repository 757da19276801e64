"""An RL job SIGKILLed after a checkpoint and resumed ends with the per-step rewards and losses of an uninterrupted
run with the same seed: policy, optimizer, schedule, prompt position, KL coefficient and the rollout engine's
weights are all restored, and sampling is seeded per step. One process (the local executor), killed whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

STEPS, SAVE_EVERY = 6, 2
OVERRIDES = [
    "+recipe=grpo_tiny_cpu",
    f"trainer.max_steps={STEPS}",
    f"checkpoint.save_steps={SAVE_EVERY}",
    "rollout.prompts_per_step=8",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=16",
    "trainer.lr=5e-3",
    "eval.steps=0",
    "logging.mlflow=false",
    "logging.progress=false",
]
KEYS = ("train/reward", "train/policy_loss", "train/kl", "train/response_length")


def _cli(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "rlhf.cli.run", *OVERRIDES, f"hydra.run.dir={run_dir}"]


def _per_step(run_dir: Path) -> dict[int, tuple]:
    return {int(r["step"]): tuple(r[k] for k in KEYS) for r in read_metrics(run_dir) if "train/reward" in r}


def test_rl_sigkill_after_checkpoint_then_resume_matches_uninterrupted(tmp_path):
    killed = tmp_path / "killed"
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(
            _cli(killed), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path
        )
        manager = CheckpointManager(killed / "checkpoints")
        wait_until(manager.latest, "the job's first checkpoint", 600, alive=lambda: proc.poll() is None)
        step = manager.driver_state(manager.latest())["step"]
        still_running = proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert still_running and step < STEPS

    done = subprocess.run(_cli(killed), capture_output=True, text=True, cwd=tmp_path, timeout=ceiling(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"at step {step}" in done.stderr

    spec = load_spec(OVERRIDES)
    run(spec, plan(spec), tmp_path / "straight")
    resumed, straight = _per_step(killed), _per_step(tmp_path / "straight")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    assert resumed == straight
