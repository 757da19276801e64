"""The two reasoning-gym recipes chained as the README gives them: SFT on generated tasks, then GRPO from the SFT
model with each sample scored by its task's score_answer and eval pass@1 reported per task (a few steps each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = pytest.mark.slow
pytest.importorskip("reasoning_gym")

TASKS = ("basic_arithmetic", "chain_sum", "spell_backward")


def rlhf_run(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlhf.cli.run", *overrides, "logging.progress=false"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=ceiling(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_sft_then_grpo_on_reasoning_gym_tasks(tmp_path):
    rlhf_run(tmp_path, "+recipe=sft_reasoning_gym_tiny_cpu", "hydra.run.dir=runs/sft", "trainer.max_steps=4")
    assert (tmp_path / "runs/sft/model/config.json").is_file()
    done = rlhf_run(
        tmp_path,
        "+recipe=grpo_reasoning_gym_tiny_cpu",
        "model.make_local=false",
        "model.path=runs/sft/model",
        "hydra.run.dir=runs/grpo",
        "trainer.max_steps=2",
        "eval.steps=2",
    )
    assert "done: rl 2 steps" in done.stderr
    rows = [json.loads(line) for line in (tmp_path / "runs/grpo/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward" in r]
    assert len(train) == 2 and all(r["train/verifier_timeout"] == 0.0 for r in train)
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert [int(r["step"]) for r in evals] == [0, 2]  # the model as loaded, then after the last step
    evaluation = evals[-1]
    per_task = {k[len("eval/eval_") : -len("_pass1")]: v for k, v in evaluation.items() if k.endswith("_pass1")}
    assert set(per_task) == set(TASKS) and all(0.0 <= v <= 1.0 for v in per_task.values())
