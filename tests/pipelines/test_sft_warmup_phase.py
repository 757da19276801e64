"""The SFT warm-up before RL is a phase of the run lifecycle (rlhf.pipelines.sft_warmup): its steps are the run's
first ones, logged as sft/*, the RL steps numbered after them; the hand-over saves the warmed-up model; and a run
stopped inside the warm-up resumes from its checkpoint there (the warm-up's data position rides in it) with the
per-step numbers of an uninterrupted run, warm-up and RL steps alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.launch.job import run
from rlhf.pipelines.sft_warmup import STATE_KEY
from rlhf.planning.plan import plan
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

WARMUP, RL_STEPS = 2, 1
BASE = [
    "+recipe=grpo_tiny_cpu",
    f"sft_warmup.steps={WARMUP}",
    "sft_warmup.train_files=[builtin:sft_tiny]",
    "sft_warmup.lr=1e-3",
    f"trainer.max_steps={RL_STEPS}",
    "rollout.prompts_per_step=4",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=16",
    "checkpoint.save_steps=1",
    "eval.steps=0",
    "logging.mlflow=false",
    "logging.progress=false",
]
KEYS = ("sft/loss", "sft/grad_norm", "train/reward", "train/policy_loss", "train/kl")


def _run(run_dir: Path, *overrides: str) -> dict:
    spec = load_spec([*BASE, *overrides])
    return run(spec, plan(spec), run_dir)


def _per_step(run_dir: Path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for r in read_metrics(run_dir):
        out.setdefault(int(r["step"]), {}).update({k: r[k] for k in KEYS if k in r})
    return out


def test_a_run_stopped_inside_the_warm_up_resumes_there_with_the_numbers_of_an_uninterrupted_run(tmp_path):
    _run(tmp_path / "straight")
    straight = _per_step(tmp_path / "straight")
    # step numbering: the warm-up's steps first (sft/* only), then the RL step after them (train/* only)
    assert sorted(straight) == [1, 2, 3]
    assert all("sft/loss" in straight[s] and "train/reward" not in straight[s] for s in (1, 2))
    assert "train/reward" in straight[3] and "sft/loss" not in straight[3]
    assert straight[1]["sft/loss"] != straight[2]["sft/loss"]  # two different batches of pairs
    assert (tmp_path / "straight" / "sft_warmup_model" / "config.json").is_file()  # the hand-over's model

    # the training rank dies in its second optimizer step (warm-up step 2), after step 1's checkpoint: on the local
    # executor that is the whole run's process, so it runs as a user's would, in a process of its own
    stopped = tmp_path / "stopped"
    died = subprocess.run(
        [sys.executable, "-m", "rlhf.cli.run", *BASE, f"hydra.run.dir={stopped}"],
        env={**os.environ, "RLHF_FAULTS": "rank.exit_on_train_step:2"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=ceiling(600),
    )
    assert died.returncode == 1, died.stderr[-3000:]
    manager = CheckpointManager(stopped / "checkpoints")
    state = manager.driver_state(manager.latest())
    assert state["step"] == 1 and STATE_KEY in state  # inside the warm-up, its data position saved

    result = _run(stopped)  # checkpoint.resume=auto: from step 1
    assert result["steps"] == WARMUP + RL_STEPS
    assert _per_step(tmp_path / "stopped") == straight
