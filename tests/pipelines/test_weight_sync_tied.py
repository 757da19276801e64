"""Finding 9 of issue 17: a model with tied input/output embeddings (a tiny Qwen2-shaped model with
tie_word_embeddings, as Qwen2.5-0.5B/1.5B are) through every weight-sync route into the hf engine and vllm-cpu,
under ZeRO-3: the engines end up exactly as close to the trainer as an engine that loaded the same weights from a
Hugging Face save, the tied head included."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_weight_sync import (
    PROMPTS,
    ROUTES,
    SAMPLING,
    _BaselineSlot,
    _drop,
    _engine_diffs,
    _mean_diff,
    _policy,
    _train_one_step,
    _trainer_logprobs,
)

from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available
from rlhf.backends.weight_sync.driver import WeightSync
from rlhf.launch.realize import realize
from rlhf.models.loading import resolve_model_path, tokenizer_for
from rlhf.pipelines.rollout_engines import RolloutEngines
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow

TIED = [
    "+recipe=grpo_tiny_cpu",
    "model.architecture=qwen2",
    "model.tie_word_embeddings=true",
    "hardware.devices_per_node=2",
    "rollout.num_engines=2",
    "algorithm.kl.coef=0",
    "trainer.zero_stage=3",
    "trainer.global_batch=4",
    "trainer.micro_batch_per_device=2",
    "trainer.lr=1e-2",
    "logging.mlflow=false",
    "logging.progress=false",
]


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_a_tied_qwen2_model_syncs_over_every_route(ray_cluster, tmp_path, backend):
    import ray

    if backend == "vllm" and not vllm_cpu_available():
        pytest.skip("no vllm-cpu venv (scripts/setup_vllm_cpu.sh)")
    spec = load_spec([*TIED, f"rollout={backend}"])
    path = resolve_model_path(spec.model)
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is True
    pad_id = tokenizer_for(spec.model, path).pad_token_id
    realized = realize(spec, plan(spec))
    try:
        engines = RolloutEngines(spec, realized, path, None)
        # vllm: one more engine outside the group, which only ever loads the Hugging Face saves (each route's in
        # turn, through the engine's own loading path), as test_weight_sync's baseline does
        base = RolloutEngines(spec, _BaselineSlot(realized), path, None).actors[0] if backend == "vllm" else None
        policy = _policy(realized, spec)
        for step, route in enumerate(ROUTES, start=1):
            _train_one_step(policy, spec.model.vocab_size, seed=step)
            ws = WeightSync(replace(spec, rollout=replace(spec.rollout, weight_sync=route)), policy, engines)
            stale = _engine_diffs(engines.actors, policy, pad_id)
            result = ws.sync()
            ws.close()
            if route != "object_store":
                for r in (r for rs in result.receivers for r in rs):
                    assert r["digest"] == result.sender["digest"] and r["first_mismatch"] is None
            synced = _engine_diffs(engines.actors, policy, pad_id)
            save = tmp_path / route
            policy.run_all("save_hf", str(save))
            if backend == "hf":
                from rlhf.backends.rollout.hf.engine import HFEngine

                rollouts = HFEngine.from_path(str(save)).generate(PROMPTS, SAMPLING)
            else:
                ray.get(base.load_from_path.remote(str(save)))
                rollouts = ray.get(base.generate.remote(PROMPTS, SAMPLING))
            fresh = _mean_diff(rollouts, _trainer_logprobs(policy, rollouts, pad_id))
            assert min(stale) > 1e-3, (route, stale)
            assert max(synced) <= fresh + 1e-6, (route, synced, fresh)
        _drop(realized, policy)
    finally:
        realized.shutdown()
