"""trainer.sequence_parallel_size: every rule of rlhf.spec.sequence_rules with its exact message, the mesh in the
batch-divisibility message, and the derived values (gradient accumulation from the data-parallel size)."""

from __future__ import annotations

import pytest

from rlhf.spec import registry, sequence_rules, validate
from rlhf.spec.build import load_spec
from rlhf.spec.derive import derive

GPU_RL = ["+recipe=grpo_llama3_8b"]  # 8 devices, policy + reference + reward colocated, 32 heads / 8 kv heads
KEY = "trainer.sequence_parallel_size"


def messages(overrides: list[str]) -> list[str]:
    return [str(e) for e in validate(load_spec(overrides)) if e.key == KEY]


def test_size_one_and_a_size_that_fits_are_valid():
    assert validate(load_spec(GPU_RL)) == []
    assert validate(load_spec(GPU_RL + [f"{KEY}=2"])) == []
    assert validate(load_spec(GPU_RL + [f"{KEY}=8"])) == []


def test_a_backend_that_does_not_split_sequences_is_refused_naming_those_that_do(monkeypatch):
    real = registry.train_backend

    class Plain(type(real("deepspeed"))):  # DeepSpeed's descriptor but for the flag
        splits_sequences = False

    monkeypatch.setattr(registry, "train_backend", lambda n: Plain() if n == "deepspeed" else real(n))
    assert messages(GPU_RL + [f"{KEY}=2"]) == [
        f"{KEY}=2: training backend deepspeed does not split sequences over ranks: use trainer.backend=fsdp2, or "
        f"{KEY}=1"
    ]
    assert sequence_rules.splitting_backends() == ["fsdp2"]


def test_both_registered_backends_split_sequences():
    assert sequence_rules.splitting_backends() == ["deepspeed", "fsdp2"]


def test_devices_not_a_multiple_names_the_roles_the_nearest_counts_and_the_sizes_that_divide():
    assert messages(GPU_RL + [f"{KEY}=3", "model.num_heads=48", "model.num_kv_heads=3"]) == [
        f"{KEY}=3: the policy, reference and reward have 8 device(s), not a multiple of 3 (ranks form groups of 3, "
        "each splitting one sample): give them 6 or 9 devices (placement.devices.policy), or a sequence size "
        "dividing 8 (1, 2, 4, 8)"
    ]


def test_one_role_of_its_own_is_named_alone():
    out = messages(
        ["+recipe=ppo_llama3_8b", f"{KEY}=2", "placement=split", "placement.devices.policy=4"]
        + ["placement.devices.critic=3", "placement.devices.reference=2", "placement.devices.reward=2"]
        + ["placement.devices.rollout=4", "hardware=2x8xh100"]
    )
    assert out == [
        f"{KEY}=2: the critic has 3 device(s), not a multiple of 2 (ranks form groups of 2, each splitting one "
        "sample): give it 2 or 4 devices (placement.devices.critic), or a sequence size dividing 3 (1, 3)"
    ]


def test_heads_not_divisible_and_kv_heads_neither_dividing_nor_divisible():
    out = messages(GPU_RL + [f"{KEY}=4", "model.num_heads=30", "model.num_kv_heads=6"])
    allowed = "sizes this model allows: 1, 2, 3, 6, 30"
    assert out == [
        f"{KEY}=4: model.num_heads (30) must be divisible by it (each rank takes num_heads / N heads after the "
        f"all-to-all); {allowed}",
        f"{KEY}=4: model.num_kv_heads (6) must divide it or be divisible by it (fewer kv heads than ranks are "
        f"repeated, so each rank holds whole ones); {allowed}",
    ]


def test_fewer_kv_heads_than_ranks_are_repeated_so_they_may_divide_the_size():
    assert messages(GPU_RL + [f"{KEY}=8", "model.num_kv_heads=2"]) == []  # 2 divides 8: each kv head on 4 ranks


def test_packing_is_required():
    assert messages(GPU_RL + [f"{KEY}=2", "trainer.packing=false"]) == [
        f"{KEY}=2: needs trainer.packing=true: each rank takes its columns of the packed rows (OpenRLHF's ring "
        "attention and veRL's Ulysses require packing too)"
    ]


def test_generation_in_the_policys_ranks_is_refused():
    out = messages(
        ["+recipe=grpo_tiny_cpu", f"{KEY}=2", "rollout.hf.in_policy=true", "hardware.devices_per_node=2"]
        + ["placement.devices.policy=2", "rollout.num_engines=2"]
    )
    assert out == [
        f"{KEY}=2: rollout.hf.in_policy=true generates in the policy's ranks with the model's own attention over "
        f"whole sequences: give the rollout engines of their own (rollout.hf.in_policy=false), or {KEY}=1"
    ]


def test_the_local_executor_is_refused_naming_ray():
    out = messages(
        ["+recipe=grpo_tiny_cpu", f"{KEY}=2", "hardware.devices_per_node=2", "launch.executor=local"]
        + ["model.num_heads=2", "model.num_kv_heads=2"]
    )
    assert (
        f"{KEY}=2: splits each sample over 2 ranks, one process each, and launch.executor=local runs one process: use "
        "launch.executor=ray (or auto)"
    ) in out


def test_the_batch_message_shows_the_mesh():
    errors = [str(e) for e in validate(load_spec(GPU_RL + [f"{KEY}=2", "trainer.global_batch=1000"]))]
    assert (
        "trainer.global_batch=1000: must be a multiple of trainer.micro_batch_per_device (4) x policy data-parallel "
        "size (policy devices (8) / trainer.sequence_parallel_size (2) = 4) = 16; e.g. 992"
    ) in errors


def test_without_sequence_parallelism_the_batch_message_shows_the_devices():
    errors = [str(e) for e in validate(load_spec(GPU_RL + ["trainer.global_batch=1000"]))]
    assert (
        "trainer.global_batch=1000: must be a multiple of trainer.micro_batch_per_device (4) x policy data-parallel "
        "size (8) = 32; e.g. 992"
    ) in errors


def test_a_batch_that_splits_only_over_the_data_parallel_ranks_is_valid():
    # 8 devices x micro 4 = 32 does not divide 48; 4 data-parallel groups x 4 = 16 does
    spec = load_spec(GPU_RL + [f"{KEY}=2", "trainer.global_batch=48", "rollout.prompts_per_step=96"])
    assert [e.key for e in validate(spec)] == []
    assert derive(spec).grad_accum["policy"] == 3
    assert derive(spec).data_parallel("policy") == 4


@pytest.mark.parametrize(
    ("heads", "kv", "sp", "ok"),
    [(32, 8, 2, True), (32, 8, 16, True), (32, 8, 3, False), (30, 6, 4, False), (64, 8, 8, True), (40, 8, 16, False)],
)
def test_head_rule_matches_the_cores(heads, kv, sp, ok):
    from rlhf.models.sequence_parallel import head_errors  # the core's own rule (imports torch)

    assert (sequence_rules.head_problems(heads, kv, sp) == []) is ok
    assert (head_errors(heads, kv, sp) == []) is ok
