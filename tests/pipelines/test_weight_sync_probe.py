"""Finding 10 of issue 17: the log-prob probe tells new weights from stale ones. It scores one fixed batch
teacher-forced (deterministic) on every engine and on the trainer: after a sync that changed the weights the
engine's log-probs moved by more than the tolerance and match the trainer's; an engine whose sync silently
delivered nothing (the sync.drop fault: received, checked, acknowledged, never loaded) is named even when the step
was smaller than the tolerance, which a comparison with the trainer alone cannot see."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from rlhf.launch.plan import plan
from rlhf.launch.realize import realize
from rlhf.models.loading import resolve_model_path, tokenizer_for
from rlhf.pipelines.experience import from_rollouts
from rlhf.pipelines.rl_losses import policy_logprobs_fn
from rlhf.pipelines.rollout_engines import RolloutEngines
from rlhf.pipelines.sft import sft_loss_fn
from rlhf.pipelines.weight_sync import WeightSync, WeightSyncError
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow

PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43, 44, 45, 46]]


def _score(policy, pad_id):
    def score(rollouts):
        exp = from_rollouts(rollouts, pad_id)
        t = exp.tensors()
        batch = [{k: v for k, v in t.items() if k in ("sequences", "attention_mask", "action_mask")}]
        lp = policy.run_all("forward", partial(policy_logprobs_fn, temperature=1.0), batch, None)[0][0]
        mask = exp.action_mask.bool()
        return [lp[i][mask[i]].tolist() for i in range(len(rollouts))]

    return score


def _step(policy, vocab, lr, seed):
    policy.run_all("set_peak_lr", lr)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, 16), generator=g)
    mb = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": torch.ones(2, 15)}
    policy.run_all("train_step", [mb], sft_loss_fn, "action_mask")


def test_the_probe_sees_new_weights_and_names_an_engine_left_with_stale_ones(ray_cluster, monkeypatch):
    from rlhf.workers import TrainerWorker

    monkeypatch.setenv("RLHF_FAULTS", "sync.drop:3")  # the engine's third sync delivers nothing
    spec = load_spec([
        "+recipe=grpo_tiny_cpu", "rollout=hf", "algorithm.kl.coef=0", "trainer.global_batch=2",
        "trainer.micro_batch_per_device=2", "trainer.lr_scheduler=constant", "trainer.warmup_ratio=0",
        "rollout.verify_sync_every=1", "logging.mlflow=false", "logging.progress=false",
    ])
    realized = realize(spec, plan(spec))
    try:
        path = resolve_model_path(spec.model)
        pad = tokenizer_for(spec.model, path).pad_token_id
        policy = realized.create_group("policy", TrainerWorker, spec, "policy")
        policy.run_all("init_trained", kind="causal_lm", total_steps=10)
        engines = RolloutEngines(spec, realized, path, None)
        ws = WeightSync(spec, policy, engines)
        tol = spec.rollout.verify_sync_tolerance

        ws.sync()
        first = ws.judge_probe(ws.probe_engines(PROMPTS, 2), _score(policy, pad))
        assert first["rollout/sync_logprob_diff_mean"] < 1e-4

        _step(policy, spec.model.vocab_size, 1e-2, seed=1)  # a step that moves every log-prob visibly
        ws.sync()
        second = ws.judge_probe(ws.probe_engines(PROMPTS, 2), _score(policy, pad))
        assert second["rollout/sync_logprob_moved"] > tol  # the engine's log-probs moved with the weights ...
        assert second["rollout/sync_logprob_diff_mean"] < 1e-4  # ... and match the trainer's

        _step(policy, spec.model.vocab_size, 1e-4, seed=2)  # a small step: the weights move less than the tolerance
        ws.sync()  # dropped by the engine, yet every checksum and digest agrees
        with pytest.raises(WeightSyncError, match=r"rollout engine 0 .*moved by .* engine's by only 0") as err:
            ws.judge_probe(ws.probe_engines(PROMPTS, 2), _score(policy, pad))
        assert err.value.kind == "probe" and err.value.engine == 0
        ws.close()
    finally:
        realized.shutdown()
