"""Token-budget micro-batches (rlhf.pipelines.batching): each sample once, equal shares per rank, the same number of
micro-batches on every rank, each within the budget and balanced; results put back in sample order; the keys'
validation and the plan's activation memory following the budget."""

from __future__ import annotations

import random

import pytest
import torch

from rlhf.pipelines.batching import balanced_partition, min_micro_batches, token_budget_plan
from rlhf.pipelines.experience import ExperienceBatch, micro_batch_plan
from rlhf.pipelines.rl_roles import _in_sample_order
from rlhf.planning.memory import activation_bytes, activation_parts
from rlhf.spec.build import load_spec
from rlhf.spec.validate import validate


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("dp", [1, 2, 4])
def test_every_rank_gets_equal_samples_and_the_same_micro_batch_count_within_the_budget(seed, dp):
    rnd = random.Random(seed)
    n = dp * rnd.randint(2, 24)
    lengths = [rnd.randint(16, 640) for _ in range(n)]
    budget = rnd.choice([640, 1000, 2048])
    plan = token_budget_plan(lengths, dp, budget)
    assert len(plan) == dp
    assert sorted(i for rank in plan for mb in rank for i in mb) == list(range(n)), "each sample exactly once"
    assert len({sum(len(mb) for mb in rank) for rank in plan}) == 1, "equal samples per rank"
    assert len({len(rank) for rank in plan}) == 1, "the same number of micro-batches on every rank"
    for rank in plan:
        assert all(mb for mb in rank), "no empty micro-batch"
        assert all(len(mb) == 1 or sum(lengths[i] for i in mb) <= budget for mb in rank)
    fewest = max(min_micro_batches([lengths[i] for mb in rank for i in mb], budget) for rank in plan)
    assert len(plan[0]) <= fewest + 2, "barely more micro-batches than first-fit needs"


def test_ranks_and_micro_batches_are_balanced_by_tokens():
    lengths = [600, 20, 30, 580, 40, 560, 25, 35] * 4
    shares = balanced_partition(lengths, range(len(lengths)), 2, equal_size=True)
    loads = [sum(lengths[i] for i in s) for s in shares]
    assert max(loads) - min(loads) <= 40 and [len(s) for s in shares] == [16, 16]
    rank = token_budget_plan(lengths, 1, 1000)[0]
    tokens = [sum(lengths[i] for i in mb) for mb in rank]
    assert max(tokens) <= 1000 and max(tokens) - min(tokens) <= 600  # long samples spread, short ones fill in


def test_a_sample_longer_than_the_budget_goes_alone():
    plan = token_budget_plan([50, 300, 40], 1, 100)[0]
    assert [1] in plan and all(sum([50, 300, 40][i] for i in mb) <= 100 for mb in plan if mb != [1])


def test_forward_results_come_back_in_sample_order():
    g = torch.Generator().manual_seed(0)
    lengths = [5, 30, 8, 22, 3, 17, 9, 28]
    width = max(lengths)
    mask = torch.zeros(8, width, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    exp = ExperienceBatch(
        sequences=torch.randint(0, 9, (8, width), generator=g),
        attention_mask=mask,
        action_mask=torch.ones(8, width - 1),
        rollout_logprobs=torch.zeros(8, width - 1),
    )
    plan = micro_batch_plan(exp, 2, 4, max_tokens=40)
    order = [i for rank in plan for mb in rank for i in mb]
    assert order != list(range(8)), "the plan reorders samples"
    # Each micro-batch's "result" is its samples' row index, trimmed to the micro-batch's longest sample.
    parts = []
    for rank in plan:
        for mb in rank:
            trimmed = exp.select(mb).trimmed()
            parts.append(torch.tensor(mb, dtype=torch.float)[:, None].expand(-1, trimmed.sequences.shape[1] - 1))
    back = _in_sample_order(parts, order)
    assert back[:, 0].tolist() == list(range(8))
    scalars = _in_sample_order([torch.tensor(mb) for rank in plan for mb in rank], order)
    assert scalars.tolist() == list(range(8))
    # several scores per token ([b, k, w]: log-probs, sum pi^2, entropy) are padded on their token axis
    stacked = _in_sample_order([p[:, None, :].expand(-1, 3, -1) for p in parts], order)
    assert stacked.shape == (8, 3, max(p.shape[-1] for p in parts))
    assert stacked[:, 2, 0].tolist() == list(range(8))


def _errors(*overrides: str) -> dict[str, str]:
    return {e.key: e.fix for e in validate(load_spec(list(overrides)))}


def test_a_budget_must_hold_a_pair_a_longer_single_sample_goes_alone_and_kto_keeps_fixed_micro_batches():
    # OpenRLHF's rule: a sample longer than the budget trains in a micro-batch of its own (its example's
    # --data.max_len 74240 with --train.max_tokens_per_gpu 16192)
    assert not _errors("+recipe=grpo_tiny_cpu", "trainer.max_tokens_per_micro_batch=50")
    errors = _errors("+recipe=dpo_tiny_cpu", "trainer.max_tokens_per_forward=100")
    assert "chosen + rejected pair" in errors["trainer.max_tokens_per_forward"]
    errors = _errors("+recipe=dpo_tiny_cpu", "algorithm=kto", "trainer.max_tokens_per_micro_batch=4096")
    assert "kto" in errors["trainer.max_tokens_per_micro_batch"]
    assert not _errors("+recipe=grpo_tiny_cpu", "trainer.max_tokens_per_micro_batch=96")
    errors = _errors("+recipe=grpo_tiny_cpu", "trainer.max_tokens_per_micro_batch=-1")
    assert "trainer.max_tokens_per_micro_batch" in errors


def _growing(spec, micro: int) -> float:
    """The activations that grow with the micro-batch's tokens (the scored logits cost one chunk, whatever the
    number of tokens)."""
    return activation_bytes(spec, micro) - activation_parts(spec, micro)["logits"]


def test_the_plans_activation_memory_follows_the_token_budget():
    spec = load_spec(["+recipe=grpo_llama3_8b"])
    fixed = _growing(spec, spec.trainer.micro_batch_per_device)
    tokens = spec.trainer.micro_batch_per_device * spec.data.max_len
    half = load_spec(["+recipe=grpo_llama3_8b", f"trainer.max_tokens_per_micro_batch={tokens // 2}"])
    assert _growing(half, half.trainer.micro_batch_per_device) == pytest.approx(fixed / 2)


def test_the_plan_charges_a_sample_longer_than_the_budget_its_whole_length():
    spec = load_spec(["+recipe=grpo_llama3_8b"])
    one_sample = activation_bytes(
        load_spec(["+recipe=grpo_llama3_8b", f"trainer.max_tokens_per_micro_batch={spec.data.max_len}"]), 1
    )
    small = load_spec(["+recipe=grpo_llama3_8b", f"trainer.max_tokens_per_micro_batch={spec.data.max_len // 4}"])
    assert activation_bytes(small, small.trainer.micro_batch_per_device) == pytest.approx(one_sample)
