"""GRPO trains on rewards from a reward model served by ``rlhf-serve-rm`` in another process (real HTTP on
127.0.0.1), through the hf rollout engine and DeepSpeed on the local executor.

The reward model is the tiny policy's body with a random value head, saved the way RM training saves one
(rlhf.models.value_head: sequence-classification layout), so the server loads it through the ordinary path.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from serve_helpers import health, serving

from rlhf.launch.job import run as run_pipeline
from rlhf.pipelines import rl
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

STEPS, PROMPTS, SAMPLES = 2, 4, 4
SMALL = [
    f"trainer.max_steps={STEPS}",
    f"rollout.prompts_per_step={PROMPTS}",
    f"rollout.samples_per_prompt={SAMPLES}",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=8",
    "logging.mlflow=false",
    "logging.progress=false",
]


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory) -> Path:
    """The tiny policy as a reward model: its body plus a value head with random weights (rewards of order 1)."""
    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.models.value_head import load_value_model

    model_spec = load_spec(["+recipe=grpo_tiny_cpu"]).model
    base = resolve_model_path(model_spec)
    model = load_value_model(base, "reward")
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model.score.weight.normal_(0.0, model.config.hidden_size**-0.5)
    out = tmp_path_factory.mktemp("served_rm")
    model.save_pretrained(out)
    tokenizer_for(model_spec, base).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def served_rm(reward_model_dir):
    """``python -m rlhf.cli.serve_rm --port 0`` in a subprocess; yields the URL it prints."""
    with serving(reward_model_dir, "--batch-size", "16", start_timeout=180) as url:  # serving() scales it
        yield url


def test_grpo_trains_on_rewards_from_a_served_reward_model(served_rm, reward_model_dir, tmp_path, monkeypatch):
    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.serve.reward_server import RewardModelScorer

    assert served_rm.startswith("http://127.0.0.1:")
    before = health(served_rm)["queries"]
    scored_steps = []
    original = rl.make_experience

    def spy(spec, workers, scored, pad_id, kl_coef):
        scored_steps.append(scored)
        return original(spec, workers, scored, pad_id, kl_coef)

    monkeypatch.setattr(rl, "make_experience", spy)
    spec = load_spec(["+recipe=grpo_tiny_cpu", "reward.verifier=", f"reward.urls=['{served_rm}']", *SMALL])
    assert spec.reward.urls == [served_rm] and not spec.reward.verifier
    result = run_pipeline(spec, plan(spec), tmp_path / "run")

    assert result["steps"] == STEPS
    served = health(served_rm)
    assert served["queries"] - before == STEPS * PROMPTS * SAMPLES  # every sample scored by the server, once
    assert served["batches"] >= 1
    metrics = read_metrics(tmp_path / "run")
    assert [int(m["step"]) for m in metrics if "train/policy_loss" in m] == list(range(1, STEPS + 1))
    assert all(math.isfinite(m["train/policy_loss"]) and math.isfinite(m["train/reward"]) for m in metrics)

    # The rewards trained on are the served model's scores of prompt + response, recomputed here without HTTP.
    tok = tokenizer_for(spec.model, resolve_model_path(spec.model))
    local = RewardModelScorer.from_path(str(reward_model_dir), device="cpu")
    assert len(scored_steps) == STEPS
    for scored, m in zip(scored_steps, metrics, strict=True):
        queries = [
            row["prompt"] + tok.decode(r.output_ids, skip_special_tokens=False)
            for row, r in zip(scored.rows, scored.rollouts, strict=True)
        ]
        assert scored.rewards == pytest.approx(local.score(queries), abs=1e-4)
        assert len(set(scored.rewards)) > 1  # a real model's scores, not a constant
        assert m["train/reward"] == pytest.approx(sum(scored.rewards) / len(scored.rewards), abs=1e-5)
