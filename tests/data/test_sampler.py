"""The resumable order: a restored state yields exactly the batches an uninterrupted run sees next."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.data import ResumableSampler, StatefulLoader


def take(sampler: ResumableSampler, n: int) -> list[list[int]]:
    return [sampler.next_indices() for _ in range(n)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 30),
    batch=st.integers(1, 7),
    cut=st.integers(0, 20),
    drop_last=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_restored_state_continues_exactly_where_the_run_stopped(n, batch, cut, drop_last, seed):
    if drop_last and n < batch:
        return
    straight = ResumableSampler(n, batch, seed, drop_last=drop_last)
    expected = take(straight, cut + 10)
    first = ResumableSampler(n, batch, seed, drop_last=drop_last)
    take(first, cut)
    state = first.state_dict()
    resumed = ResumableSampler(n, batch, seed, drop_last=drop_last)
    resumed.load_state_dict(state)
    assert take(resumed, 10) == expected[cut:]


def test_epochs_are_full_permutations_in_different_orders():
    s = ResumableSampler(10, 5, seed=0)
    e0, e1 = take(s, 2), take(s, 2)
    assert sorted(sum(e0, [])) == sorted(sum(e1, [])) == list(range(10))
    assert e0 != e1 and s.epoch == 1


def test_drop_last_skips_the_short_tail_and_iteration_ends_the_epoch():
    s = ResumableSampler(7, 3, seed=0, drop_last=True)
    assert [len(b) for b in s] == [3, 3] and len(s) == 2 and s.epoch == 1
    keep = ResumableSampler(7, 3, seed=0, drop_last=False)
    assert [len(b) for b in keep] == [3, 3, 1] and len(keep) == 3


def test_resume_mid_epoch_through_iteration():
    s = ResumableSampler(12, 3, seed=5)
    it = iter(s)
    seen = [next(it), next(it)]
    state = s.state_dict()
    rest = list(it)
    r = ResumableSampler(12, 3, seed=5)
    r.load_state_dict(state)
    assert list(r) == rest and sorted(sum(seen + rest, [])) == list(range(12))


def test_state_from_another_setup_is_refused():
    state = ResumableSampler(10, 2, seed=0).state_dict()
    with pytest.raises(ValueError, match="batch_size=2"):
        ResumableSampler(10, 5, seed=0).load_state_dict(state)


def test_too_few_items_for_one_batch_is_refused():
    with pytest.raises(ValueError, match="cannot fill one batch"):
        ResumableSampler(3, 4, drop_last=True)


def test_loader_ranks_split_each_global_batch_and_resume():
    data = [{"x": i} for i in range(8)]

    def collate(rows):
        return [r["x"] for r in rows]

    r0 = StatefulLoader(data, 4, collate, seed=1, world_size=2, rank=0)
    r1 = StatefulLoader(data, 4, collate, seed=1, world_size=2, rank=1)
    b0, b1 = r0.next_batch(), r1.next_batch()
    assert len(b0) == len(b1) == 2 and not set(b0) & set(b1)
    again = StatefulLoader(data, 4, collate, seed=1, world_size=2, rank=0)
    again.load_state_dict(r0.state_dict())
    assert again.next_batch() == r0.next_batch()
    with pytest.raises(ValueError, match="not divisible"):
        StatefulLoader(data, 3, collate, world_size=2)
