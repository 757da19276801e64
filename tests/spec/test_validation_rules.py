"""Every cross-field rule, each with a failing example: the error names the full key, and all problems come at once."""

from __future__ import annotations

import pytest

from rlhf.spec import validate
from rlhf.spec.build import load_spec

GPU_RL = ["+recipe=grpo_llama3_8b"]
CPU_RL = ["+recipe=grpo_tiny_cpu"]


def error_keys(overrides: list[str]) -> list[str]:
    return [e.key for e in validate(load_spec(overrides))]


def test_shipped_base_recipes_are_valid():
    assert error_keys(GPU_RL) == []
    assert error_keys(CPU_RL) == []


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        # batch divisibility
        (GPU_RL + ["trainer.global_batch=1000"], "trainer.global_batch"),
        (GPU_RL + ["trainer.micro_batch_per_device=3"], "trainer.global_batch"),
        (GPU_RL + ["trainer.global_batch=2048"], "trainer.global_batch"),
        # group estimators need samples_per_prompt >= 2
        (GPU_RL + ["rollout.samples_per_prompt=1", "trainer.global_batch=128"], "rollout.samples_per_prompt"),
        (GPU_RL + ["algorithm.advantage.gamma=0.9"], "algorithm.advantage.gamma"),
        # gae needs a critic; group estimators run without one
        (GPU_RL + ["placement.devices.critic=2"], "placement.devices.critic"),
        (["+recipe=ppo_llama3_8b", "placement.devices.critic=0"], "placement.devices.critic"),
        # colocate_all: policy devices = engines x TP
        (GPU_RL + ["rollout.num_engines=2", "placement.devices.policy=8"], "rollout.num_engines"),
        # every role's devices fit the hardware
        (["+recipe=ppo_llama3_70b", "placement.devices.policy=40"], "placement.devices"),
        # a tensor-parallel group fits in one node
        (
            GPU_RL + ["rollout.tensor_parallel_size=16", "rollout.num_engines=1", "placement=split"],
            "rollout.tensor_parallel_size",
        ),
        # zero stage
        (GPU_RL + ["trainer.zero_stage=7"], "trainer.zero_stage"),
        # fp16 on CPU
        (CPU_RL + ["trainer.precision=fp16"], "trainer.precision"),
        # LoRA with incompatible options
        (GPU_RL + ["model.lora.rank=8", "trainer.offload_params=true"], "trainer.offload_params"),
        (GPU_RL + ["model.lora.rank=8", "model.lora.dropout=1.5"], "model.lora.dropout"),
        (["+recipe=rm_llama3_8b", "model.lora.rank=8"], "model.lora.rank"),
        # missing model path or data path
        (GPU_RL + ["model.path=/no/such/model"], "model.path"),
        (GPU_RL + ["model.path="], "model.path"),
        (CPU_RL + ["data.train_files=[./no_such.jsonl]"], "data.train_files[0]"),
        (CPU_RL + ["data.train_files=[]"], "data.train_files"),
        (CPU_RL + ["data.train_files=[builtin:nope]"], "data.train_files[0]"),
        # reward sources: exactly one
        (CPU_RL + ["reward.verifier="], "reward"),
        (CPU_RL + ["reward.urls=[http://127.0.0.1:1/r]"], "reward"),
        (CPU_RL + ["reward.function=./missing_reward.py", "reward.verifier="], "reward.function"),
        # registry names
        (CPU_RL + ["algorithm.advantage.estimator=grpo"], "algorithm.advantage.estimator"),
        (CPU_RL + ["algorithm.kl.estimator=k4"], "algorithm.kl.estimator"),
        (CPU_RL + ["algorithm.policy_loss.aggregation=mean"], "algorithm.policy_loss.aggregation"),
        (CPU_RL + ["placement.colocate=[[policy,actor]]"], "placement.colocate[0]"),
        # algorithm parameters
        (CPU_RL + ["algorithm.policy_loss.dual_clip=0.5"], "algorithm.policy_loss.dual_clip"),
        (CPU_RL + ["algorithm.policy_loss.type=gspo"], "algorithm.policy_loss.aggregation"),
        (CPU_RL + ["algorithm.kl.coef=-1"], "algorithm.kl.coef"),
        (
            CPU_RL + ["algorithm.filters.dynamic_filtering=true", "algorithm.filters.dynamic_filtering_range=[1,0]"],
            "algorithm.filters.dynamic_filtering_range",
        ),
        (CPU_RL + ["rollout.max_new_tokens=500"], "rollout.max_new_tokens"),
        (CPU_RL + ["rollout.min_new_tokens=9"], "rollout.min_new_tokens"),
        (CPU_RL + ["rollout.vllm.max_num_seqs=0"], "rollout.vllm.max_num_seqs"),
        (CPU_RL + ["algorithm.filters.overlong_buffer_len=64"], "algorithm.filters.overlong_buffer_len"),
        (CPU_RL + ["data.input_template=no_placeholder"], "data.input_template"),
        (CPU_RL + ["data.train_probs=[0.5,0.5]"], "data.train_probs"),
        (CPU_RL + ["agent.executor=multi_turn"], "agent.path"),
        (GPU_RL + ["rollout.async_mode=true"], "rollout.async_mode"),
        # rollout.hf.in_policy: on the policy's devices, one engine per rank, whole weights, synchronous
        (
            CPU_RL + ["rollout.hf.in_policy=true", "placement=split", "hardware.devices_per_node=3"],
            "rollout.hf.in_policy",
        ),
        (CPU_RL + ["rollout.hf.in_policy=true", "trainer.zero_stage=3"], "trainer.zero_stage"),
        (CPU_RL + ["rollout.hf.in_policy=true", "trainer.backend=fsdp2"], "trainer.backend"),
        (CPU_RL + ["rollout.hf.in_policy=true", "rollout.async_mode=true"], "rollout.async_mode"),
        (
            CPU_RL + ["rollout.hf.in_policy=true", "hardware.devices_per_node=2", "placement.devices.policy=2"],
            "rollout.num_engines",
        ),
        (CPU_RL + ["rollout.hf.in_policy=true", "rollout.only=true"], "rollout.hf.in_policy"),
    ],
)
def test_rule_reports_the_full_key(overrides, key):
    assert key in error_keys(overrides)


def test_every_problem_is_reported_together():
    keys = error_keys(GPU_RL + ["trainer.zero_stage=7", "trainer.global_batch=1000", "model.path=/no/such"])
    assert {"trainer.zero_stage", "trainer.global_batch", "model.path"} <= set(keys)


def test_error_message_names_value_and_fix():
    (err,) = [e for e in validate(load_spec(GPU_RL + ["trainer.zero_stage=7"]))]
    assert err.value == 7 and "one of 0, 1, 2, 3" in err.fix
    assert str(err).startswith("trainer.zero_stage=7:")


def test_vllm_on_cpu_needs_a_cpu_build(monkeypatch):
    import importlib

    v = importlib.import_module("rlhf.backends.rollout.vllm.interpreter")  # what the vllm backend's rule asks

    monkeypatch.setattr(v, "vllm_cpu_available", lambda: False)
    assert "rollout.backend" in error_keys(CPU_RL + ["rollout=vllm"])
    monkeypatch.setattr(v, "vllm_cpu_available", lambda: True)
    assert "rollout.backend" not in error_keys(CPU_RL + ["rollout=vllm"])


@pytest.mark.parametrize("key", ["batch_normalize=true", "seq_ratio=product"])
def test_a_key_shaping_the_is_weights_is_refused_while_the_correction_is_off(key):
    assert error_keys(CPU_RL + [f"algorithm.is_correction.{key}"]) == [f"algorithm.is_correction.{key.split('=')[0]}"]
    on = ["level=seq", "mode=clip", "gating=ratio"] if "seq_ratio" in key else ["type=tis"]
    assert error_keys(CPU_RL + [f"algorithm.is_correction.{k}" for k in (*on, key)]) == []
