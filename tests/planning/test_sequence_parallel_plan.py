"""Sequence parallelism in the plan: the activation term per rank (rlhf.planning.memory.activation_parts), the model
states still sharded over every rank, the cost model's all-to-alls and samples per data-parallel group, the mesh in
``rlhf-plan``'s table, and ``--auto``'s sequence dimension."""

from __future__ import annotations

import pytest

from rlhf.cli.plan import render
from rlhf.planning import memory
from rlhf.planning.auto import _sequence, sequence_sizes, with_values
from rlhf.planning.cost import estimate
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec

GPU_RL = ["+recipe=grpo_llama3_8b"]  # 8 devices, 32 heads / 8 kv heads
LONG = GPU_RL + ["data.max_len=32768", "rollout.max_new_tokens=30720", "trainer.max_tokens_per_micro_batch=0"]
LONG += ["trainer.gradient_checkpointing=false"]
KEY = "trainer.sequence_parallel_size"


def _spec(*extra: str):
    return load_spec([*LONG, *extra])


def test_each_rank_keeps_its_share_of_the_tokens_and_the_exchanged_heads():
    one, two = _spec(), _spec(f"{KEY}=2")
    p1 = memory.activation_parts(one, 1)
    p2 = memory.activation_parts(two, 1)
    assert p2["final norm, RoPE"] == pytest.approx(p1["final norm, RoPE"] / 2)
    m, b = one.model, 2
    per_token_1 = p1["layers"] / m.num_layers / 32768
    per_token_2 = p2["layers"] / m.num_layers / 16384
    # Ulysses: q and k, v repeated to the rank's heads, its output in heads and back in columns (5ad) in place of
    # q, k, v, out of flash-attention / sdpa on rows of one sample ((2a + 2k)d)
    a, k, d = m.num_heads, m.num_kv_heads, m.head_dim
    assert per_token_2 - per_token_1 == pytest.approx((5 * a - 2 * a - 2 * k) * d * b)
    assert p1["logits"] == p2["logits"]  # one chunk of the vocabulary at a time, whatever the split
    assert memory.activation_bytes(two, 1) < 0.6 * memory.activation_bytes(one, 1)


def test_the_token_budget_is_per_device_so_a_group_takes_its_size_times_it():
    spec = _spec(f"{KEY}=4", "trainer.max_tokens_per_micro_batch=16384")
    assert memory.micro_batch_tokens(spec, 1) == 65536
    assert memory.activation_bytes(spec, 1) == pytest.approx(memory.activation_bytes(_spec(f"{KEY}=4"), 2))


def test_rows_of_several_samples_under_sdpa_keep_a_mask_per_layer_without_sequence_parallelism():
    spec = load_spec(
        GPU_RL
        + [
            "data.max_len=4096",
            "rollout.max_new_tokens=2048",
            "trainer.micro_batch_per_device=1",
            "trainer.max_tokens_per_micro_batch=0",
            "trainer.gradient_checkpointing=false",
        ]
    )
    mask = memory.activation_parts(spec, 1, samples_per_row=2)["attention mask"]
    assert mask == 4096 * 4096 * (1 + spec.model.num_layers * 2)  # the booleans, and a bf16 copy in every layer
    assert memory.activation_parts(spec, 1)["attention mask"] == 0  # the plan's full-length samples: one per row
    flash = with_values(spec, {"model.attn_implementation": "flash_attention_2"})
    assert memory.activation_parts(flash, 1, samples_per_row=2)["attention mask"] == 0
    split = with_values(spec, {KEY: 2})
    assert memory.activation_parts(split, 1, samples_per_row=2)["attention mask"] == 0


def test_the_critic_scores_one_value_per_token_not_the_vocabulary():
    spec = load_spec(["+recipe=ppo_llama3_8b"])
    assert memory.activation_parts(spec, 1, role="critic")["logits"] == 0
    assert memory.activation_parts(spec, 1)["logits"] > 0


def test_the_model_states_stay_sharded_over_every_rank():
    one, two = plan(_spec()), plan(_spec(f"{KEY}=2"))
    s1, s2 = one.memory[0].per_role["policy"], two.memory[0].per_role["policy"]
    assert (s1.weights, s1.grads, s1.optimizer) == (s2.weights, s2.grads, s2.optimizer)
    assert s2.activations < 0.6 * s1.activations


def test_the_logit_chunk_is_the_trainers():
    logprobs = pytest.importorskip("rlhf.algo.logprobs")
    if not hasattr(logprobs, "LOGIT_CHUNK_TOKENS"):
        pytest.skip("the trainers score the whole logits (no LOGIT_CHUNK_TOKENS yet)")
    assert memory.LOGIT_CHUNK_TOKENS == logprobs.LOGIT_CHUNK_TOKENS


def test_the_cost_model_charges_the_all_to_alls_and_splits_samples_over_data_parallel_groups():
    one, two = _spec(), _spec(f"{KEY}=2")
    e1, e2 = estimate(one, plan(one)), estimate(two, plan(two))
    # the same FLOPs per rank (half the tokens of samples that two ranks share), plus the exchange and more
    # micro-batches of half the tokens: slower, not twice as slow
    assert e1.phases["train"] < e2.phases["train"] < 1.5 * e1.phases["train"]
    assert e1.phases["generation"] == e2.phases["generation"]
    from rlhf.planning.cost import _Ctx, _device, constants_for, sequence_exchange

    x1 = _Ctx(one, plan(one), constants_for(one), _device(one), "exact")
    x2 = _Ctx(two, plan(two), constants_for(two), _device(two), "exact")
    assert sequence_exchange(x1, "policy", 16384, 2) == 0.0
    forward, both = sequence_exchange(x2, "policy", 16384, 1), sequence_exchange(x2, "policy", 16384, 2)
    assert both == pytest.approx(2 * forward) and forward > 0
    m = two.model
    exchanged = 16384 * (2 * m.num_heads + 2 * max(m.num_kv_heads, 2)) * m.head_dim * 2 / 2  # (N-1)/N of it
    link = two.hardware.link_bandwidth_gbs * 1e9 * x2.c.comm_eff
    assert forward == pytest.approx(m.num_layers * (exchanged / link + 4 * x2.c.collective_s))


def test_rlhf_plan_shows_each_roles_mesh():
    text = render(plan(load_spec(GPU_RL + [f"{KEY}=2"])))
    assert "  policy         0     8   0.25  dp 4 x sp 2    0" in text
    assert "  rollout        0     4   0.25  -              0  4 engine(s) x TP 2" in text


def test_auto_tries_the_sizes_that_divide_the_devices_and_the_heads():
    spec = load_spec(GPU_RL)
    assert sequence_sizes(spec, 8) == [1, 2, 4, 8]
    assert sequence_sizes(spec, 6) == [1, 2]
    assert sequence_sizes(with_values(spec, {"model.num_heads": 40}), 8) == [1, 2, 4, 8]
    assert sequence_sizes(with_values(spec, {"model.num_heads": 20, "model.num_kv_heads": 4}), 8) == [1, 2, 4]
    assert sequence_sizes(with_values(spec, {"trainer.packing": False}), 8) == [1]
    assert [o[KEY] for o in _sequence(spec)] == [1, 2, 4, 8]
    # trainer.global_batch 1024 splits over 8 data-parallel ranks; 1002 only over 2 (sp 4) or 1 (sp 8)
    assert [o[KEY] for o in _sequence(with_values(spec, {"trainer.global_batch": 1002}))] == [4, 8]
