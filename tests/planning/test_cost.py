"""The cost model of ``rlhf-plan --auto`` (rlhf/planning/cost.py): its pure pieces against numbers worked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from rlhf.planning import cost
from rlhf.planning.cost import (
    CPU,
    GPU,
    ModuleCost,
    StepEstimate,
    _Ctx,
    _device,
    _generation,
    estimate,
    forward_flops,
    gathered_units,
    hooks_s,
    reuses_current_logprobs,
)
from rlhf.planning.memory import param_count
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec


def test_forward_flops_of_the_tiny_model_by_hand():
    # tiny: h=128, 2 layers, 2 heads of 64, MLP 256, vocab 264, untied. Per layer 4 x 128^2 (attention) + 3 x 128 x
    # 256 (MLP) + 2 x 128 (norms) = 164,096; all: 2 x 264 x 128 (embedding, head) + 2 layers + 128 = 395,904; the
    # input embedding is a lookup, so 362,112 multiply. 10 tokens in sequences of 10: 2 x 362,112 x 10 matmul FLOPs
    # plus attention 2 x L x a x d x s x t = 2 x 2 x 2 x 64 x 10 x 10.
    m = load_spec(["+recipe=grpo_tiny_cpu"]).model
    assert param_count(m)[0] == 395_904
    assert forward_flops(m, tokens=10, seq=10) == 2 * 362_112 * 10 + 51_200 == 7_293_440


def test_a_step_is_its_phases_in_turn_and_async_overlaps_generation_with_training():
    phases = {"generation": 4.0, "reward": 1.0, "experience": 2.0, "train": 6.0, "sync": 0.5, "bubble": 0.25,
              "overhead": 0.25}
    assert StepEstimate(phases).total == 14.0
    # async: max(generation + reward, experience + train) + the rest = max(5, 8) + 1
    assert StepEstimate(phases, overlapped=True).total == 9.0


def test_a_cpu_slot_gets_its_share_of_the_node_and_a_gpu_its_datasheet():
    cpu = _device(load_spec(["+recipe=grpo_tiny_cpu", "hardware.devices_per_node=2"]))
    assert cpu.flops == pytest.approx(0.19e12 / 2)  # fp32 training: device_tflops_fp32 over two slots
    assert cpu.bandwidth == pytest.approx(13e9 / 2)
    gpu = _device(load_spec(["+recipe=grpo_llama3_8b"]))  # bf16 on an H100
    assert gpu.flops == pytest.approx(989e12) and gpu.bandwidth == pytest.approx(3350e9)
    assert gpu.network == pytest.approx(400e9 / 8)  # the node's NICs shared by its 8 GPUs


def test_a_ring_collective_moves_n_minus_one_nths_of_the_bytes_at_the_achieved_bandwidth():
    spec = load_spec(["+recipe=grpo_llama3_8b"])
    x = _Ctx(spec, plan(spec), GPU, _device(spec), "exact")
    # 1 GB over 4 ranks on a 100 GB/s link at 75% efficiency: 0.75 GB / 75 GB/s
    assert x.ring(1e9, 4, 100e9) == pytest.approx(0.01)
    assert x.ring(1e9, 1, 100e9) == 0.0  # one rank: nothing to send
    assert x.calls(10, 4) == pytest.approx(10 * GPU.collective_s)
    bound = _Ctx(spec, plan(spec), GPU, _device(spec), "placement")
    assert bound.ring(1e9, 4, 100e9) == 0.0  # the bound over every training engine counts no traffic


def test_generating_one_sequence_by_hand():
    # Llama-3-8B on one H100 (vLLM, TP 1), one prompt of 1,948 tokens (the plan's longest), one sample, 100 new
    # tokens. P = 8,030,261,248 parameters, P' = P - 128,256 x 4,096 (the input embedding) = 7,504,924,672.
    # Decode, per token: read 2 bytes per parameter plus the KV cache of the mean context (1,948 + 50 tokens x
    # 131,072 bytes) at 60% of 3.35 TB/s (8.12 ms; the 16 GFLOP of compute at 40% of 989 TFLOP/s is 0.04 ms), plus
    # the 4 ms fixed step and 10 us for the sequence. Prefill: 2 P' x 1,948 + 2 x 32 layers x 32 heads x 128 x
    # 1,948^2 FLOPs at 50% of peak (60 ms). One remote call: 20 ms.
    spec = load_spec(["+recipe=grpo_llama3_8b", "hardware=1xh100", "placement.devices.policy=null",
                      "rollout.prompts_per_step=1", "rollout.samples_per_prompt=1", "rollout.max_new_tokens=100",
                      "rollout.num_engines=1", "rollout.tensor_parallel_size=1", "trainer.global_batch=1",
                      "trainer.micro_batch_per_device=1"])
    p = plan(spec)
    assert p.derived.max_prompt_len == 1948
    read = (2 * 8_030_261_248 + 1998 * 131_072) / (3350e9 * 0.60)
    decode = 100 * (read + 0.004 + 10e-6)
    prefill = (2 * 7_504_924_672 * 1948 + 2 * 32 * 32 * 128 * 1948**2) / (989e12 * 0.50)
    assert read == pytest.approx(0.00812, rel=1e-3) and prefill == pytest.approx(0.0611, rel=1e-3)
    x = _Ctx(spec, p, GPU, _device(spec), "exact")
    assert _generation(x, 1948, 100) == pytest.approx(decode + prefill + 0.02, rel=1e-9)


def test_the_cpu_constants_are_measured_and_the_gpu_ones_name_their_source():
    assert set(GPU.sources) >= {"train_eff", "decode_bw_eff", "comm_eff", "wake_sleep_s"}
    assert CPU.sources and CPU.comm_overlap == 0.0  # gloo on one core each: nothing overlaps


def test_the_cost_model_reuses_log_probs_exactly_where_the_pipeline_does():
    from rlhf.pipelines.rl_roles import reuses_current_logprobs as pipeline_reuses  # imports torch: here only

    for recipe in ("grpo_tiny_cpu", "ppo_tiny_cpu", "reinforce_pp_tiny_cpu", "opd_tiny_cpu", "gspo_tiny_cpu"):
        spec = load_spec([f"+recipe={recipe}", *(["teacher.model_path=teacher"] if recipe == "opd_tiny_cpu" else [])])
        assert reuses_current_logprobs(spec, plan(spec)) == pipeline_reuses(spec), recipe
    # IS weights normalised over the rollout batch need every old log-prob before training: the pass is kept
    tis = ["+recipe=grpo_tiny_cpu", "trainer.global_batch=128", "algorithm.is_correction.type=tis"]  # one step
    for normalized in (False, True):
        spec = load_spec([*tis, f"algorithm.is_correction.batch_normalize={normalized}"])
        assert reuses_current_logprobs(spec, plan(spec)) == pipeline_reuses(spec) == (not normalized)


@pytest.mark.parametrize("bound", ["layout", "placement"])
def test_the_search_bounds_never_exceed_the_exact_estimate(bound):
    for overrides in (["+recipe=grpo_llama3_8b"], ["+recipe=ppo_llama3_8b", "trainer.zero_stage=3"],
                      ["+recipe=grpo_tiny_cpu", "hardware.devices_per_node=2"]):
        spec = load_spec(overrides)
        p = plan(spec)
        assert estimate(spec, p, bound=bound).total <= estimate(spec, p).total + 1e-12, overrides


def test_an_unknown_bound_is_refused():
    spec = load_spec(["+recipe=grpo_tiny_cpu"])
    with pytest.raises(ValueError, match="bound='loose'"):
        estimate(spec, plan(spec), bound="loose")


def test_an_adapter_only_sync_costs_a_fraction_of_a_merged_one():
    base = ["+recipe=grpo_llama3_8b", "model.lora.rank=16"]
    merged, adapter = load_spec(base), load_spec([*base, "rollout.weight_sync_lora=adapter"])
    m, a = estimate(merged, plan(merged)).phases["sync"], estimate(adapter, plan(adapter)).phases["sync"]
    # past the fixed cost of the calls, the bytes: well under a tenth (rank 16 adapters are ~0.5% of the weights)
    assert a - GPU.call_s < (m - GPU.call_s) / 10


HOOKS = dataclasses.replace(CPU, zero3_module=ModuleCost(train_s=1.0, forward_s=2.0, step_s=3.0, sync_s=4.0),
                            fsdp2_unit=ModuleCost(train_s=10.0, forward_s=20.0, step_s=30.0, sync_s=40.0))


def test_sharded_hooks_cost_a_fixed_time_per_gathered_module_and_pass_by_hand():
    base = ["+recipe=grpo_tiny_cpu"]
    zero3 = load_spec([*base, "trainer.zero_stage=3"])
    assert gathered_units(zero3) == 9 * 2 + 3  # 7 projections + 2 norms per layer, 2 untied embeddings, final norm
    # 21 modules x (2 training micro-batches x 1 s + 3 forwards x 2 s + 1 step x 3 s + 1 sync x 4 s)
    assert hooks_s(zero3, HOOKS, train_mbs=2, forward_mbs=3, steps=1, syncs=1) == 21 * 15
    recompute = load_spec([*base, "trainer.zero_stage=3", "trainer.gradient_checkpointing=true"])
    assert hooks_s(recompute, HOOKS, train_mbs=2) == 21 * 2 * (1.0 + 2.0)  # the recomputed forward gathers again
    fsdp2 = load_spec([*base, "trainer.backend=fsdp2"])
    assert gathered_units(fsdp2) == 2 + 2 + 1  # a unit per decoder layer, the 2 embeddings, the root
    assert hooks_s(fsdp2, HOOKS, train_mbs=1, forward_mbs=1) == 5 * (10.0 + 20.0)
    zero2 = load_spec([*base, "trainer.zero_stage=2"])
    assert hooks_s(zero2, HOOKS, train_mbs=2, forward_mbs=3, steps=1, syncs=1) == 0.0  # nothing sharded: no hooks


def test_on_one_rank_zero3_costs_more_than_zero2_by_its_hooks_alone(monkeypatch):
    # One slot: policy, reference and the engine on one rank, so no collective runs and the hooks are the whole
    # difference. 16 samples: the policy trains 4 micro-batches of 4 in one optimizer step, the reference scores 2
    # forward micro-batches of 8 (the policy's own forward is reused), one weight sync.
    monkeypatch.setattr(cost, "CPU", HOOKS)
    base = ["+recipe=grpo_tiny_cpu", "rollout.prompts_per_step=4", "rollout.samples_per_prompt=4",
            "trainer.global_batch=16", "trainer.micro_batch_per_device=4", "rollout.micro_batch_per_device=8"]
    zero2, zero3 = load_spec([*base, "trainer.zero_stage=2"]), load_spec([*base, "trainer.zero_stage=3"])
    e2, e3 = estimate(zero2, plan(zero2)).phases, estimate(zero3, plan(zero3)).phases
    assert e3["train"] - e2["train"] == pytest.approx(21 * (4 * 1.0 + 1 * 3.0))
    assert e3["experience"] - e2["experience"] == pytest.approx(21 * 2 * 2.0)
    assert e3["sync"] - e2["sync"] == pytest.approx(21 * 4.0)
    assert e3["generation"] == e2["generation"]
    # the bound over every training engine of a placement counts none of it
    b2, b3 = (estimate(s, plan(s), bound="placement").total for s in (zero2, zero3))
    assert b3 == pytest.approx(b2)
