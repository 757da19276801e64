"""The two reasoning-gym recipes chained as the README gives them: SFT on generated tasks, then GRPO from the SFT
model with each sample scored by its task's score_answer and eval pass@1 reported per task (a few steps each),
through ``rlhf.run`` in this process (the same compose, validation, preflight and local executor as rlhf-run)."""

from __future__ import annotations

import pytest

import rlhf
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow
pytest.importorskip("reasoning_gym")

TASKS = ("basic_arithmetic", "chain_sum", "spell_backward")


def test_sft_then_grpo_on_reasoning_gym_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the MLflow store of each stage: ./mlflow.db
    quiet = "logging.progress=false"
    sft = rlhf.run("sft_reasoning_gym_tiny_cpu", "trainer.max_steps=4", quiet, run_dir=tmp_path / "runs/sft")
    assert (sft.model_dir / "config.json").is_file()
    grpo = rlhf.run(
        "grpo_reasoning_gym_tiny_cpu",
        "model.make_local=false",
        f"model.path={sft.model_dir}",
        "trainer.max_steps=2",
        "eval.steps=2",
        quiet,
        run_dir=tmp_path / "runs/grpo",
    )
    assert grpo.summary["steps"] == 2
    rows = read_metrics(grpo.run_dir)
    train = [r for r in rows if "train/reward" in r]
    assert len(train) == 2 and all(r["train/verifier_timeout"] == 0.0 for r in train)
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert [int(r["step"]) for r in evals] == [0, 2]  # the model as loaded, then after the last step
    evaluation = evals[-1]
    per_task = {k[len("eval/eval_") : -len("_pass1")]: v for k, v in evaluation.items() if k.endswith("_pass1")}
    assert set(per_task) == set(TASKS) and all(0.0 <= v <= 1.0 for v in per_task.values())
