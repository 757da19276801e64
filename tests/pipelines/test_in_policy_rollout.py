"""``rollout.hf.in_policy``: the policy's ranks generate with the module they train, through real Ray actors and
DeepSpeed ranks. No engine process starts and no weights are synced, yet every sample is the one a separate hf engine
holding the same weights would draw: before training (the model on disk) and after an optimizer step (the weights
only the trainer has), and over a whole GRPO run, step for step, against the same run with engines of their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlhf.backends.contract.rollout import SamplingSpec
from rlhf.launch.realize import realize
from rlhf.models.loading import resolve_model_path
from rlhf.planning.plan import plan
from rlhf.spec import check
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow

TWO_RANKS = [
    "+recipe=grpo_tiny_cpu",
    "rollout.hf.in_policy=true",
    "hardware.devices_per_node=2",  # two policy ranks, each one engine
    "rollout.num_engines=2",
    "algorithm.kl.coef=0",
    "trainer.global_batch=4",
    "trainer.micro_batch_per_device=2",
    "trainer.lr=1e-2",  # one step moves every weight visibly
    "logging.mlflow=false",
    "logging.progress=false",
]
PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43, 44, 45, 46], [1, 7]]
SAMPLING = SamplingSpec(max_new_tokens=12, temperature=1.0, n=2, seed=7)


def _fresh_engine_samples(path: str) -> list:
    """What a separate hf engine loading ``path`` draws for PROMPTS, shared over two engines as the run shares them
    over its ranks (engine i seeded ``seed + i``)."""
    from dataclasses import replace

    from rlhf.backends.rollout.hf.engine import HFEngine

    engine = HFEngine.from_path(path)
    half = len(PROMPTS) // 2
    return engine.generate(PROMPTS[:half], SAMPLING) + engine.generate(
        PROMPTS[half:], replace(SAMPLING, seed=SAMPLING.seed + 1)
    )


def _same(ours: list, theirs: list) -> None:
    assert [r.output_ids for r in ours] == [r.output_ids for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.finish_reason == b.finish_reason
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_the_policy_ranks_generate_with_the_weights_they_train_and_no_engine_process_starts(ray_cluster, tmp_path):
    from rlhf.pipelines.rl_roles import RLWorkers
    from rlhf.pipelines.sft import sft_loss_fn

    spec = load_spec(TWO_RANKS)
    check(spec)
    path = resolve_model_path(spec.model)
    realized = realize(spec, plan(spec))
    try:
        workers = RLWorkers(spec, realized, path, total_steps=10)
        assert realized.rollout_groups == [] and workers.weight_sync is None  # no engine actor, nothing to sync
        pids = [p["pid"] for p in workers.policy.run_all("ping")]
        assert [i["pid"] for i in workers.rollout.info] == pids and len(set(pids)) == 2

        _same(workers.rollout.generate(PROMPTS, SAMPLING), _fresh_engine_samples(path))

        # One optimizer step: the next samples come from the new weights, with no sync in between.
        ids = torch.randint(3, spec.model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": torch.ones(2, 15)}
        out = workers.policy.run_per_rank("train_step", [([batch], sft_loss_fn, "action_mask")] * 2)
        assert out[0]["grad_norm"] > 0
        save = tmp_path / "after"
        workers.policy.run_all("save_hf", str(save))
        after = workers.rollout.generate(PROMPTS, SAMPLING)
        _same(after, _fresh_engine_samples(str(save)))
        before = _fresh_engine_samples(path)
        assert [r.logprobs for r in after] != [r.logprobs for r in before]  # the step changed what is sampled
    finally:
        realized.shutdown()


def _train(run_dir: Path, *overrides: str) -> list[dict]:
    from rlhf.launch.job import run

    spec = load_spec(["+recipe=grpo_tiny_cpu", "trainer.max_steps=2", "logging.mlflow=false", *overrides])
    check(spec)
    run(spec, plan(spec), run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "train/reward" in r or "eval/eval_pass1_mean" in r]


def test_a_grpo_run_generating_in_the_policy_samples_what_separate_engines_sample(ray_cluster, tmp_path):
    small = ["rollout.prompts_per_step=8", "trainer.global_batch=32", "trainer.micro_batch_per_device=16"]
    small += ["eval.steps=1", "logging.progress=false"]
    engines = _train(tmp_path / "engines", *small)
    ours = _train(tmp_path / "in_policy", *small, "rollout.hf.in_policy=true")
    assert [r["step"] for r in ours] == [r["step"] for r in engines] == [0, 1, 2]
    for a, b in zip(ours, engines, strict=True):
        for k in ("train/reward", "train/response_length", "train/total_length", "eval/eval_pass1_mean"):
            assert a.get(k) == b.get(k), (a["step"], k)  # the same samples, step for step
        if a["step"] > 0:
            assert a["train/policy_loss"] == pytest.approx(b["train/policy_loss"], rel=1e-5, abs=1e-7)
            assert a["train/logprobs_diff"] < 1e-5
            assert "train/timing/broadcast" in b and "train/timing/broadcast" not in a  # no weight sync at all
