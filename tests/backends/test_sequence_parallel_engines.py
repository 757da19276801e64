"""Sequence parallelism in the training engines is exact: SFT and GRPO over packed rows of spread lengths, with
``trainer.sequence_parallel_size=2`` on two gloo ranks, take the same steps as the same global batch on one rank
without it, on DeepSpeed ZeRO-2, ZeRO-3 and FSDP2 (sp_parity.py runs each side): per-step losses and every metric
the loss functions log (KL, entropy, clip fraction, ...), the gradient norm, the weights after each step (the
optimizer is made linear there, so they compare the gradients), the old and reference log-probs of the forwards
without gradients and a frozen critic's values. Several processes: the Ray tier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ceilings import ceiling

from rlhf.launch.ports import free_port
from rlhf.models.loading import resolve_model_path
from rlhf.spec.schema import ModelSpec

HERE = Path(__file__).parent
TOL = 1e-5
# One process group per backend: the DeepSpeed cases share theirs (ZeRO-2 before ZeRO-3, whose partitioned loading is
# process-wide until the rank leaves).
FAMILIES = {
    "deepspeed": [
        "zero2=trainer.backend=deepspeed,trainer.zero_stage=2",
        "zero3=trainer.backend=deepspeed,trainer.zero_stage=3",
    ],
    "fsdp2": ["fsdp2=trainer.backend=fsdp2"],
}
# The forwards' layout, not a number of the step: one row split over the ranks against sdpa rows in one process.
LAYOUT_KEYS = {"tokens_computed"}


def _start(world: int, out: Path, model: str, cases: list[str]) -> list[subprocess.Popen]:
    env = {**os.environ, "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = "1"
    return [
        subprocess.Popen(
            [sys.executable, str(HERE / "sp_parity.py"), str(out), model, *cases],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]


def _wait(procs: list[subprocess.Popen], what: str) -> None:
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=ceiling(600))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"{what} rank {r} failed:\n{log[-4000:]}"


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1.0)


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor], relative: bool = False) -> float:
    diffs = [
        (x - y).abs().max() / (y.abs().max().clamp(min=1.0) if relative else 1.0) for x, y in zip(a, b, strict=True)
    ]
    return float(max(diffs))


def _compare(one: dict, two: dict) -> dict[str, float]:
    """The largest difference of each kind between the unsplit run (``one``) and the split one (``two``)."""
    worst: dict[str, float] = {}
    for task in ("sft", "grpo"):
        assert len(one[task]) == len(two[task]) == 2
        for m1, m2 in zip(one[task], two[task], strict=True):
            assert set(m1) == set(m2), (task, sorted(m1), sorted(m2))
            for k in set(m1) - LAYOUT_KEYS:
                worst[f"{task}/{k}"] = max(worst.get(f"{task}/{k}", 0.0), _rel(m2[k], m1[k]))
    for k in ("old_logprobs", "ref_logprobs", "values"):
        worst[k] = _max_diff(two[k], one[k])
    worst["sft_eval_nll"] = _max_diff(two["sft_eval_nll"], one["sft_eval_nll"], relative=True)  # sums over tokens
    w1, w2 = one["weights"], two["weights"]
    assert len(w1) == len(w2) == 5 and set(w1[0]) == set(w2[0])
    worst["weights"] = max(float((a[n] - b[n]).abs().max()) for a, b in zip(w2, w1, strict=True) for n in a)
    # the steps moved the weights by far more than the tolerance: the comparison is not of unmoved weights
    worst["moved"] = max(float((w1[-1][n] - w1[0][n]).abs().max()) for n in w1[0])
    return worst


@pytest.mark.slow
@pytest.mark.ray  # several processes: the tier of ranks
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_sequence_parallel_ranks_take_the_steps_of_one_rank_without_it(tmp_path, family):
    model = resolve_model_path(ModelSpec(make_local=True))  # made here, before any rank exists
    cases = FAMILIES[family]
    one, two = _start(1, tmp_path, model, cases), _start(2, tmp_path, model, cases)
    _wait(one, f"{family} on one rank")
    _wait(two, f"{family} on two sequence-parallel ranks")
    for case in cases:
        name = case.partition("=")[0]
        worst = _compare(
            torch.load(tmp_path / f"{name}.world1.pt", weights_only=False),
            torch.load(tmp_path / f"{name}.world2.pt", weights_only=False),
        )
        print(f"{name}: " + ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items())))
        moved = worst.pop("moved")
        assert moved > 100 * TOL, moved
        over = {k: v for k, v in worst.items() if v > TOL}
        assert not over, f"{name}: sequence parallelism changed {over}"
