"""The plan: layout keeps groups within nodes, and the memory estimate agrees with DeepSpeed's own estimator."""

from __future__ import annotations

import pytest

from rlhf.backends.train.deepspeed.descriptor import trained_states
from rlhf.planning.memory import GB, lora_param_count, param_count
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec


def _model_states(spec, dp, offload_opt=False, offload_params=False):
    params, largest = param_count(spec.model)
    s = trained_states(params, largest, dp, spec.trainer.zero_stage, "bf16", offload_opt, offload_params)
    return params, largest, s.weights + s.grads + s.optimizer


def test_param_count_matches_llama3_8b():
    params, _ = param_count(load_spec(["+recipe=grpo_llama3_8b"]).model)
    assert abs(params - 8.03e9) / 8.03e9 < 0.01


@pytest.mark.parametrize(("offload_opt", "offload_params"), [(False, False), (True, False), (True, True)])
def test_zero3_estimate_agrees_with_deepspeed_within_10_percent(offload_opt, offload_params):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    spec = load_spec(["+recipe=grpo_llama3_8b", "trainer.zero_stage=3"])
    params, largest, ours = _model_states(spec, 8, offload_opt, offload_params)
    _, theirs, _ = estimate_zero3_model_states_mem_needs(
        params, largest, num_gpus_per_node=8, num_nodes=1, cpu_offload=offload_opt, cpu_offload_params=offload_params
    )
    assert abs(ours - theirs) / theirs < 0.10, (ours / 2**30, theirs / 2**30)


@pytest.mark.parametrize("offload_opt", [False, True])
def test_zero2_estimate_agrees_with_deepspeed_within_10_percent(offload_opt):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    spec = load_spec(["+recipe=grpo_llama3_8b", "trainer.zero_stage=2"])
    params, _, ours = _model_states(spec, 8, offload_opt)
    _, theirs = estimate_zero2_model_states_mem_needs(params, 8, 1, cpu_offload=offload_opt)
    assert abs(ours - theirs) / theirs < 0.10


def test_zero3_needs_less_memory_than_zero2_and_offload_less_still():
    base = ["+recipe=grpo_llama3_8b"]
    peak = {}
    for name, extra in {
        "z2": ["trainer.zero_stage=2"],
        "z3": ["trainer.zero_stage=3"],
        "z3off": ["trainer.zero_stage=3", "trainer.offload_optimizer=true"],
    }.items():
        peak[name] = plan(load_spec(base + extra)).memory[0].per_role["policy"].device
    assert peak["z2"] > peak["z3"] > peak["z3off"]


def test_tensor_parallel_engines_never_span_nodes():
    spec = load_spec(["+recipe=ppo_llama3_70b"])
    p = plan(spec)
    ro = p.roles["rollout"]
    group = p.groups[ro.group]
    assert ro.ranks == 4 and ro.bundles_per_rank == 4
    for engine in ro.engine_bundles:
        assert len({group.nodes[b] for b in engine}) == 1
    assert p.warnings == ()


def test_groups_that_fit_a_node_stay_in_one_node_and_are_sorted_by_node():
    p = plan(load_spec(["+recipe=ppo_llama3_70b"]))
    for g in p.groups:
        assert list(g.nodes) == sorted(g.nodes)
        if g.size <= 8:
            assert len(set(g.nodes)) == 1
    # three groups of 16 devices over six nodes of eight: each takes two whole nodes
    assert sorted(tuple(sorted(set(g.nodes))) for g in p.groups) == [(0, 1), (2, 3), (4, 5)]


def test_colocated_roles_share_bundles_with_fractional_devices():
    p = plan(load_spec(["+recipe=ppo_llama3_8b"]))
    assert len(p.groups) == 1
    assert {r.fraction for r in p.roles.values()} == {0.2}


def test_overflow_verdict_names_the_group_and_amount():
    p = plan(load_spec(["+recipe=grpo_qwen2_5_0_5b", "model=llama3_70b"]))
    assert not p.fits
    assert "does not fit" in p.verdict() and "over by" in p.verdict()


def test_cpu_plan_uses_cpu_bundles():
    p = plan(load_spec(["+recipe=grpo_tiny_cpu"]))
    assert all("GPU" not in g.bundle for g in p.groups)
    assert p.fits


def test_plan_counts_the_weight_sync_buffers_per_device():
    p = plan(load_spec(["+recipe=grpo_llama3_8b", "trainer.zero_stage=3"]))
    # the largest weight (embedding, 128256 x 4096 in bf16) sets the bucket; ZeRO-3 gathers one and packs one
    embed = 128256 * 4096 * 2
    assert p.sync is not None and p.sync.bucket == embed
    assert p.sync.device["policy"] == 2 * embed and p.sync.device["rollout"] == embed
    assert all(m.sync_phase_gb > 0 for m in p.memory)


def test_object_store_route_costs_a_host_copy_per_rank():
    broadcast = plan(load_spec(["+recipe=grpo_llama3_8b", "rollout.weight_sync=broadcast"]))
    object_store = plan(load_spec(["+recipe=grpo_llama3_8b", "rollout.weight_sync=object_store"]))
    full = broadcast.params * 2
    assert object_store.hosts[0].needed_gb * GB - broadcast.hosts[0].needed_gb * GB >= 8 * full


def test_host_memory_per_node_is_part_of_the_verdict():
    p = plan(load_spec(["+recipe=ppo_llama3_70b", "hardware.host_memory_gb=256"]))
    assert all(m.fits for m in p.memory)
    assert not p.fits and "host memory of node 0" in p.verdict() and "offloaded states" in p.verdict()


def test_an_adapter_only_sync_is_planned_at_the_adapters_size():
    base = ["+recipe=grpo_llama3_8b", "model.lora.rank=16", "rollout.weight_sync=object_store"]
    merged = plan(load_spec(base))
    adapter = plan(load_spec([*base, "rollout.weight_sync_lora=adapter"]))
    lora = lora_param_count(load_spec(base).model) * 2  # bf16 bytes of every A and B matrix
    assert lora < merged.params * 2 / 100  # rank 16 on an 8B model: well under 1% of its weights
    assert adapter.sync.host_per_rank["policy"] == lora and merged.sync.host_per_rank["policy"] == merged.params * 2
    assert adapter.sync.bucket <= lora < merged.sync.bucket
    assert adapter.hosts[0].needed_gb < merged.hosts[0].needed_gb
