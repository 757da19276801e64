"""OpenRLHF 0.11.2's new presets train end to end on CPU (DeepSpeed and the hf rollout engine, the local executor):
FlashREINFORCE with one sample per prompt and its sequence-level binary-KL trust region, and GRPO with a
token-level binary-KL gate. The engines and the trainer agree on CPU, so the trust regions keep every unit."""

from __future__ import annotations

import pytest
from test_rl_pipeline import QUIET, assert_trained, train

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("recipe", "sizes"),
    [
        # One optimizer step per rollout, as FlashREINFORCE runs: 32 prompts x 1 sample = the global batch.
        ("flash_reinforce_tiny_cpu", ["rollout.prompts_per_step=32", "trainer.global_batch=32"]),
        # Two optimizer steps per rollout: the gate reads recomputed old log-probs.
        ("grpo_binary_kl_tiny_cpu", ["rollout.prompts_per_step=8", "trainer.global_batch=32"]),
    ],
)
def test_binary_kl_trust_region_recipe_trains_two_steps(tmp_path, recipe, sizes):
    assert "eval.steps=0" in QUIET
    result, steps = train(tmp_path, recipe, *sizes, "trainer.micro_batch_per_device=16")
    assert_trained(result, steps)
    for s in steps:
        assert s["train/is_filter_ratio"] == 0.0, s  # nothing is past the trust region when both sides agree
        assert s["train/logprobs_diff"] < 1e-3
