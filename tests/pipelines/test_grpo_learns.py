"""RL learning is tested: a short GRPO run must raise the eval pass@1 of the builtin tasks by a stated margin, so a
change that breaks learning fails CI while numerical noise does not.

The run is the embedded default (recipes/quickstart_cpu.yaml) cut short: 60 SFT warm-up steps leave the model at
about 0.4 mean pass@1 over copy/next/add, then 40 GRPO steps (the recipe's lr, 2e-4). What is compared is the eval
at the hand-over (step 60, after the SFT steps, before any RL step) with the mean of the last two evals (steps 90 and
100, to halve the eval's noise), so the gain is RL's alone.

Measured on the 2-core machine (2026-12-01), mean pass@1 over the three tasks, hand-over -> last two evals:
seed 1: 0.377 -> 0.686 (+0.31), seed 2: 0.395 -> 0.562 (+0.17), seed 3: 0.494 -> 0.569 (+0.075). The margin asked
(0.04) is about half the smallest gain seen; one eval's own noise (50 prompts x 4 samples) is about 0.03. At lr 5e-4
seed 3 collapsed (0.49 -> 0.26), hence the recipe's lower rate.
"""

from __future__ import annotations

import pytest

from rlhf.launch.job import run
from rlhf.launch.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

TASKS = ("copy", "next", "add")
WARMUP, RL_STEPS = 60, 40
MARGIN = 0.04


def _mean_pass1(row: dict) -> float:
    return sum(row[f"eval/eval_{t}_pass1"] for t in TASKS) / len(TASKS)


def test_grpo_raises_mean_eval_pass1_over_the_builtin_tasks(ray_cluster, tmp_path):
    spec = load_spec(
        [
            "+recipe=quickstart_cpu",
            "seed=1",
            f"sft_warmup.steps={WARMUP}",
            "sft_warmup.eval_steps=0",
            f"trainer.max_steps={RL_STEPS}",
            "eval.steps=10",
            "logging.mlflow=false",
            "logging.progress=false",
        ]
    )
    run(spec, plan(spec), tmp_path)
    evals = {int(r["step"]): _mean_pass1(r) for r in read_metrics(tmp_path) if "eval/eval_copy_pass1" in r}
    end = WARMUP + RL_STEPS
    assert {0, WARMUP, end - 10, end} <= set(evals), sorted(evals)
    before, after = evals[WARMUP], (evals[end - 10] + evals[end]) / 2
    assert evals[0] < 0.1  # the untrained model: about nothing right
    assert after - before >= MARGIN, f"GRPO moved mean eval pass@1 from {before:.3f} to {after:.3f}: {evals}"
