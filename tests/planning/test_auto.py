"""The layout search of ``rlhf-plan --auto`` (rlhf/planning/auto.py): what it keeps fits the plan's memory model and
validates, it ranks by the cost model, and its pieces (spec edits, group sizes, the staircase walk) do what they say."""

from __future__ import annotations

import pytest

from rlhf.planning.auto import (
    MEMORY_HEADROOM,
    TIE_PER_CHANGE,
    _maximal,
    group_sizes,
    search,
    with_values,
)
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.spec.validate import validate

CASES = {
    "tiny-cpu": ["+recipe=grpo_tiny_cpu", "hardware.devices_per_node=2"],
    "8b-8xh100": ["+recipe=grpo_llama3_8b", "hardware=8xh100"],
}


@pytest.fixture(scope="module", params=list(CASES))
def searched(request):
    spec = load_spec(CASES[request.param])
    return spec, search(spec, top=5)


def test_five_layouts_ranked_by_estimated_time_each_fitting_and_valid(searched):
    spec, r = searched
    assert len(r.ranked) == 5
    for c in r.ranked:
        p = plan(c.spec)  # planned again from the spec alone: the kept plan is the spec's own
        assert p.fits and not p.warnings
        assert all(m.peak_gb <= m.capacity_gb * (1 - MEMORY_HEADROOM) for m in p.memory)
        assert validate(c.spec) == []
        assert c.cost.total == pytest.approx(sum(c.cost.phases.values()))
    keys = [c.seconds * (1 + TIE_PER_CHANGE * len(c.changed)) for c in r.ranked]
    assert keys == sorted(keys)
    assert len({tuple(sorted((k, repr(v)) for k, v in c.values.items())) for c in r.ranked}) == 5


def test_the_best_is_no_slower_than_the_recipe_as_given(searched):
    spec, r = searched
    assert r.base is not None and r.base.plan.fits
    assert r.ranked[0].seconds <= r.base.seconds * (1 + TIE_PER_CHANGE * len(r.ranked[0].changed))


def test_the_8b_search_lays_out_the_whole_node():
    r = search(load_spec(CASES["8b-8xh100"]), top=1)
    best = r.ranked[0]
    assert sum(g.size for g in best.plan.groups) == 8
    ro = best.spec.rollout
    assert ro.num_engines * ro.tensor_parallel_size <= 8 and 32 % ro.tensor_parallel_size == 0  # heads divide


def test_a_recipe_laid_out_for_a_larger_cluster_is_relaid_for_a_smaller_one():
    # ppo_llama3_70b's own layout needs 48 GPUs; on two 8xH100 nodes its layout is invalid as given, the search
    # still finds 16-GPU ones
    spec = load_spec(["+recipe=ppo_llama3_70b", "hardware=2x8xh100"])
    assert validate(spec)
    r = search(spec, top=2)
    assert r.ranked and r.base is None and r.base_errors
    assert all(sum(g.size for g in c.plan.groups) <= 16 and c.plan.fits for c in r.ranked)


def test_a_batch_that_splits_over_no_full_cluster_uses_fewer_devices():
    # SFT's global batch of 128 does not split over 48 GPUs: the policy gets 32 of them
    r = search(load_spec(["+recipe=sft_llama3_8b", "hardware=6x8xa100_80g"]), top=1)
    assert r.ranked and r.ranked[0].spec.placement.devices.policy == 32


def test_nothing_fits_says_why_for_the_closest_layout():
    spec = load_spec(["+recipe=ppo_llama3_70b", "hardware=1xh100"])
    r = search(spec, top=5)
    assert r.ranked == [] and "does not fit" in r.why_none and "GB" in r.why_none


def test_with_values_replaces_nested_keys_like_dataclasses_replace():
    from dataclasses import replace

    spec = load_spec(CASES["tiny-cpu"])
    got = with_values(spec, {"trainer.zero_stage": 3, "trainer.fsdp2.cpu_offload": True, "rollout.num_engines": 2})
    want = replace(spec, trainer=replace(spec.trainer, zero_stage=3, fsdp2=replace(spec.trainer.fsdp2,
                   cpu_offload=True)), rollout=replace(spec.rollout, num_engines=2))
    assert got == want and spec.trainer.zero_stage != 3  # the original is untouched
    with pytest.raises(KeyError, match="no_such"):
        with_values(spec, {"trainer.no_such": 1})


def test_group_sizes_are_powers_of_two_within_a_node_then_whole_nodes():
    assert group_sizes(8, 8) == [1, 2, 4, 8]
    assert group_sizes(48, 8) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert group_sizes(2, 2) == [1, 2]


def test_the_staircase_walk_finds_the_maximal_fitting_points_and_plans_few():
    # a point (i, j) fits where i + j >= 3 on a 4 x 4 grid (larger index: less memory, never faster)
    calls = []

    def at(idx):
        calls.append(idx)
        return idx if sum(idx) >= 3 else None

    got = sorted(set(_maximal(at, [4, 4])))
    assert got == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert len(set(calls)) <= 4 + 4 + 1  # O(rows + columns), not the 16 points
    assert _maximal(lambda idx: idx if idx[0] >= 5 else None, [8]) == [(5,)]  # one dimension: a binary search
    assert _maximal(lambda idx: None, [4, 4]) == []


GPU_RECIPES = ["grpo_llama3_8b", "ppo_llama3_8b", "ppo_llama3_70b", "grpo_qwen2_5_0_5b", "grpo_qwen2_5_0_5b_h200",
               "rloo_llama3_8b", "reinforce_pp_baseline_llama3_8b", "sft_llama3_8b", "rm_llama3_8b", "dpo_llama3_8b"]


@pytest.mark.parametrize("recipe", GPU_RECIPES)
def test_every_shipped_gpu_recipe_gets_a_written_layout_on_its_own_hardware(recipe, tmp_path):
    from rlhf.planning.auto_recipe import write_recipe

    overrides = [f"+recipe={recipe}"]
    r = search(load_spec(overrides), top=1)
    assert r.ranked, r.why_none
    # composes back to the chosen spec, validates and fits, or raises naming the keys that differ
    write_recipe(tmp_path / f"{recipe}_auto.yaml", overrides, r.ranked[0])
