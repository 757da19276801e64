"""How the pipelines hand work to a role whose ranks split each sample (sequence parallelism, the backend's mesh):
shares are cut per data-parallel rank, every rank of a sequence-parallel group gets its group's share, one result
per group comes back, and a token budget per device grows with the group's size. Without a mesh (every rank
data-parallel) nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlhf.futures import LocalRef
from rlhf.launch.role_calls import RoleCalls
from rlhf.pipelines.batching import micro_batch_tokens
from rlhf.pipelines.experience import ExperienceBatch
from rlhf.pipelines.rl_roles import forward_in_ranks
from rlhf.pipelines.role_set import with_mesh
from rlhf.spec.build import load_spec
from rlhf.spec.mesh import Mesh


class _Method:
    def __init__(self, rank: int, name: str, calls: list) -> None:
        self.rank, self.name, self.calls = rank, name, calls

    def remote(self, *args: Any, **kwargs: Any) -> LocalRef:
        self.calls.append((self.rank, self.name, args))
        if self.name == "forward":  # fn(model, batch) per batch, as EngineWorker.forward
            fn, batches, _ = args
            return LocalRef.of(lambda: [fn(None, b) for b in batches])
        return LocalRef.of(lambda: {"rank": self.rank, "arg": args[0]})


class _Actor:
    def __init__(self, rank: int, calls: list) -> None:
        self.rank, self.calls = rank, calls

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.rank, name, self.calls)


class _Group(RoleCalls):
    def __init__(self, ranks: int) -> None:
        self.role = "policy"
        self.calls: list = []
        self.actors = [_Actor(r, self.calls) for r in range(ranks)]


def test_each_sequence_parallel_group_gets_its_data_parallel_share_and_answers_once():
    group = _Group(4)
    group.use_mesh(Mesh(data=2, sequence=2))
    assert group.data_parallel == 2
    out = group.run_per_rank("train_step", ["share0", "share1"])
    assert sorted((r, args[0]) for r, _, args in group.calls) == [
        (0, "share0"),
        (1, "share0"),
        (2, "share1"),
        (3, "share1"),
    ]
    assert out == [{"rank": 0, "arg": "share0"}, {"rank": 2, "arg": "share1"}]  # the first rank of each group
    with pytest.raises(ValueError, match="4 per-rank arguments for 2 data-parallel ranks"):
        group.run_per_rank("train_step", ["a", "b", "c", "d"])


def test_without_a_mesh_every_rank_is_data_parallel_as_before():
    group = _Group(3)
    assert group.data_parallel == 3 and micro_batch_tokens(group, 100) == 100
    assert [o["arg"] for o in group.run_per_rank("train_step", ["a", "b", "c"])] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="a mesh of 2 ranks"):
        group.use_mesh(Mesh(data=1, sequence=2))


def test_the_mesh_comes_from_the_backend_and_the_token_budget_is_per_device():
    spec = load_spec(["+recipe=grpo_tiny_cpu", "hardware.devices_per_node=4", "trainer.sequence_parallel_size=2"])
    group = with_mesh(_Group(4), spec)
    assert group.mesh == Mesh(data=2, sequence=2)
    assert micro_batch_tokens(group, 1000) == 2000  # each device holds half of a micro-batch's tokens
    assert micro_batch_tokens(group, 0) == 0
    assert with_mesh(_Group(4), load_spec(["+recipe=grpo_tiny_cpu"])).data_parallel == 4


def test_experience_forwards_are_cut_per_data_parallel_rank_and_come_back_in_sample_order():
    n, width = 8, 6
    seq = torch.arange(n * width).reshape(n, width)
    exp = ExperienceBatch(
        sequences=seq,
        attention_mask=torch.ones(n, width, dtype=torch.long),
        action_mask=torch.ones(n, width - 1),
        rollout_logprobs=torch.zeros(n, width - 1),
    )
    group = _Group(4)
    group.use_mesh(Mesh(data=2, sequence=2))
    out = forward_in_ranks(group, lambda model, b: b["sequences"][:, 0], exp, None, micro_batch=2)
    assert torch.equal(torch.cat(out), seq[:, 0])
    shares = {r: [b["sequences"][:, 0].tolist() for b in args[1]] for r, _, args in group.calls}  # (fn, batches, name)
    assert shares[0] == shares[1] and shares[2] == shares[3] and shares[0] != shares[2]
