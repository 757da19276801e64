"""Finding 10 of issue 17: the log-prob probe tells new weights from stale ones. It scores one fixed batch
teacher-forced (deterministic) on every engine and on the trainer: after a sync that changed the weights the
engine's log-probs moved by more than the tolerance and match the trainer's; an engine whose sync silently
delivered nothing (the sync.drop fault: received, checked, acknowledged, never loaded) is named even when the step
was smaller than the tolerance, which a comparison with the trainer alone cannot see."""

from __future__ import annotations

import pytest
from probe_helpers import PROMPTS, policy_and_sync, sft_step, trainer_score  # shared by name, like tiny_shapes

from rlhf.backends.weight_sync.driver import WeightSyncError
from rlhf.launch.realize import realize
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow


def test_the_probe_sees_new_weights_and_names_an_engine_left_with_stale_ones(ray_cluster, monkeypatch):
    monkeypatch.setenv("RLHF_FAULTS", "sync.drop:3")  # the engine's third sync delivers nothing
    spec = load_spec([
        "+recipe=grpo_tiny_cpu", "rollout=hf", "algorithm.kl.coef=0", "trainer.global_batch=2",
        "trainer.micro_batch_per_device=2", "trainer.lr_scheduler=constant", "trainer.warmup_ratio=0",
        "rollout.verify_sync_every=1", "logging.mlflow=false", "logging.progress=false",
    ])
    realized = realize(spec, plan(spec))
    try:
        policy, ws, pad = policy_and_sync(spec, realized)
        tol = spec.rollout.verify_sync_tolerance

        ws.sync()
        first = ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
        assert first["rollout/sync_logprob_diff_mean"] < 1e-4

        sft_step(policy, spec.model.vocab_size, 1e-2, seed=1)  # a step that moves every log-prob visibly
        ws.sync()
        second = ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
        assert second["rollout/sync_logprob_moved"] > tol  # the engine's log-probs moved with the weights ...
        assert second["rollout/sync_logprob_diff_mean"] < 1e-4  # ... and match the trainer's

        sft_step(policy, spec.model.vocab_size, 1e-4, seed=2)  # a small step: the weights move less than the tolerance
        ws.sync()  # dropped by the engine, yet every checksum and digest agrees
        with pytest.raises(WeightSyncError, match=r"rollout engine 0 .*moved by .* engine's by only 0") as err:
            ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
        assert err.value.kind == "probe" and err.value.engine == 0
        ws.close()
    finally:
        realized.shutdown()
