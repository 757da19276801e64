"""RL learning is tested: GRPO after the SFT warm-up must raise the mean eval pass@1 of the builtin tasks by at
least three standard errors, so a change that breaks learning fails CI while the eval's noise does not.

The run is the embedded default (recipes/quickstart_cpu.yaml: 100 SFT steps, then 60 GRPO steps, eval on 300
prompts per task) on its own seed, with evals only where they are compared: at the hand-over (after the SFT
steps, before any RL step) and after the last RL step, so the gain is RL's alone. The error of the gain is
sqrt(se_h^2 + se_f^2), each the standard error of a mean over the three tasks, sqrt(sum_t se_t^2) / 3, from the
per-task SEs with the samples clustered by prompt (rlhf.pipelines.rl_metrics); adding the two variances ignores
that both evals use the same prompts (their errors correlate positively), which errs on the safe side.

Measured on the 2-core machine (2026-12-01, shared), mean pass@1 hand-over -> end and the gain in standard errors of
the gain: seed 1 0.809 -> 0.900 (5.6), seed 2 0.926 -> 0.967 (4.1), seed 3 0.927 -> 0.974 (4.8), seed 42 (the
default's) 0.916 -> 0.970 (5.2). Cut shorter it does not hold on every seed: after 40 RL steps 2.6 to 4.3 over
those four seeds, after 20 steps 2.1 to 4.2; a higher rate does not make up for the steps (20 steps, seed 1: 2.3 at
lr 1e-4, 2.7 at 2e-4, where seed 2 fell 4.9 below its hand-over).

After packed sequences became the default (2026-12-02) the steps' numerics changed: seed 42 then gained 8.7 standard
errors (0.860 -> 0.968), seed 1 only 2.8 (0.881 -> 0.920), under the 3 asked; the test runs the default's seed, and a
single other seed falling short is named here rather than hidden. On 2026-12-07 seed 42 gained 4.2 standard errors
(0.942 -> 0.979), the same at torch's default threads and at one thread per process (the default tier's setting).

It is marked ``learning`` and runs in the second tier (``pytest -q -m "ray or learning"``, which CI runs on every
change), at torch's default threads: in the default tier it cost 91 CPU-s, the most of any test, and took that tier
past its 8 minutes.
"""

from __future__ import annotations

import math

import pytest

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.learning]

TASKS = ("copy", "next", "add")
SEED = 42  # the embedded default's own seed: what the README's table claims
MARGIN_SE = 3.0


def test_grpo_raises_mean_eval_pass1_by_three_standard_errors(tmp_path):
    spec = load_spec(
        [
            "+recipe=quickstart_cpu",
            f"seed={SEED}",
            "sft_warmup.eval_steps=0",
            "eval.steps=1000",  # evals at step 0, the hand-over and after the last step only
            "eval.best_metric=none",  # no best_model/ saves
            "checkpoint.save_steps=0",  # one checkpoint, at the end
            "logging.mlflow=false",
            "logging.progress=false",
        ]
    )
    run(spec, plan(spec), tmp_path)
    evals = {int(r["step"]): r for r in read_metrics(tmp_path) if "eval/eval_pass1_mean" in r}
    warmup, end = spec.sft_warmup.steps, spec.sft_warmup.steps + spec.trainer.max_steps
    assert set(evals) == {0, warmup, end}, sorted(evals)
    assert evals[0]["eval/eval_pass1_mean"] < 0.1  # the untrained model: about nothing right
    before, after = evals[warmup], evals[end]
    for row in (before, after):
        assert all(row[f"eval/eval_{t}_pass1_se"] <= 0.03 for t in TASKS), row
    gain = after["eval/eval_pass1_mean"] - before["eval/eval_pass1_mean"]
    se = math.hypot(before["eval/eval_pass1_mean_se"], after["eval/eval_pass1_mean_se"])
    assert gain >= MARGIN_SE * se, (
        f"GRPO moved mean eval pass@1 from {before['eval/eval_pass1_mean']:.3f} to "
        f"{after['eval/eval_pass1_mean']:.3f}: {gain / se:.1f} standard errors, {MARGIN_SE} asked"
    )
