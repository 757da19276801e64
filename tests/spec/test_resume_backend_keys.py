"""What a resume may not change is partly the checkpoint's training backend's to say
(rlhf.backends.contract.training.TrainBackend.checkpoint_bound_keys, optimizer_bound_to_ranks): every registered
backend's keys are refused when the run that wrote the checkpoint used it, and are only named otherwise."""

from __future__ import annotations

import pytest

from rlhf.spec.registry import TRAIN_BACKENDS, train_backend
from rlhf.spec.resume_rules import flatten, judge

BASE = flatten(
    {
        "algorithm": {"name": "grpo"},
        "model": {"name": "tiny"},
        "trainer": {"backend": "deepspeed", "zero_stage": 2, "lr": 1e-3, "fsdp2": {"cpu_offload": False}},
    }
)


def _changed(flat: dict, key: str) -> dict:
    value = flat.get(key)
    return {**flat, key: (value + 1) if isinstance(value, int) and not isinstance(value, bool) else f"not {value}"}


@pytest.mark.parametrize("backend", sorted(TRAIN_BACKENDS))
def test_the_keys_a_backends_checkpoint_is_laid_out_by_are_refused_on_resume(backend):
    old = {**BASE, "trainer.backend": backend}
    bound = train_backend(backend).checkpoint_bound_keys()
    for key in bound:
        refused, _ = judge(old, _changed(old, key))
        assert [c.key for c in refused] == [key]
    for other in {k for name in TRAIN_BACKENDS for k in train_backend(name).checkpoint_bound_keys()} - set(bound):
        refused, noted = judge(old, _changed(old, other))  # another backend's: a change named, not refused
        assert refused == [] and [c.key for c in noted] == [other]


def test_the_zero_stage_binds_a_deepspeed_checkpoint_and_not_an_fsdp2_one():
    refused, _ = judge(BASE, {**BASE, "trainer.zero_stage": 3})
    assert [str(c) for c in refused] == ["trainer.zero_stage: 2 -> 3"]
    fsdp2 = {**BASE, "trainer.backend": "fsdp2"}
    refused, noted = judge(fsdp2, {**fsdp2, "trainer.zero_stage": 3})
    assert refused == [] and [c.key for c in noted] == ["trainer.zero_stage"]
