"""Sequence parallelism in the training engines is exact: SFT and GRPO over packed rows of spread lengths, with
``trainer.sequence_parallel_size=2`` on two gloo ranks, take the same steps as the same global batch on one rank
without it, on DeepSpeed ZeRO-2, ZeRO-3 and FSDP2 (sp_parity.py runs each side): per-step losses and every metric
the loss functions log (KL, entropy, clip fraction, ...), the gradient norm, the weights after each step (the
optimizer is made linear there, so they compare the gradients), the old and reference log-probs of the forwards
without gradients and a frozen critic's values. And with data parallelism beside it (FSDP2 with gradient
checkpointing, 2 x 2 ranks against 2 data-parallel ranks): the token counts are summed over the DP group only, the
gradients averaged over it, and the recomputed layers split as in the forward.
Several processes: the Ray tier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ceilings import ceiling
from sp_parity import compare

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


def _start(world: int, sp: int, out: Path, model: str, cases: list[str]) -> list[subprocess.Popen]:
    env = {**os.environ, "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(OMP_NUM_THREADS="1", SP_PARITY_SP=str(sp))
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


def _same_steps(out: Path, model: str, cases: list[str], dp: int) -> None:
    """``cases`` on ``dp`` data-parallel ranks without sequence parallelism and on ``dp`` SP groups of 2 (both
    started at once), compared."""
    unsplit, split = _start(dp, 1, out, model, cases), _start(2 * dp, 2, out, model, cases)
    _wait(unsplit, f"{cases} on {dp} rank(s)")
    _wait(split, f"{cases} on {dp} sequence-parallel group(s) of 2")
    for case in cases:
        name = case.partition("=")[0]
        worst = compare(
            torch.load(out / f"{name}.dp{dp}.sp1.pt", weights_only=False),
            torch.load(out / f"{name}.dp{dp}.sp2.pt", weights_only=False),
        )
        print(f"{name} dp={dp}: " + ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items())))
        moved = worst.pop("moved")
        assert moved > 100 * TOL, moved
        over = {k: v for k, v in worst.items() if v > TOL}
        assert not over, f"{name}, dp={dp}: sequence parallelism changed {over}"


@pytest.fixture(scope="module")
def model() -> str:
    return resolve_model_path(ModelSpec(make_local=True))  # made here, before any rank exists


@pytest.mark.slow
@pytest.mark.ray  # several processes: the tier of ranks
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_sequence_parallel_ranks_take_the_steps_of_one_rank_without_it(tmp_path, model, family):
    _same_steps(tmp_path, model, FAMILIES[family], dp=1)


@pytest.mark.slow
@pytest.mark.ray
def test_two_sequence_parallel_groups_take_the_steps_of_two_data_parallel_ranks(tmp_path, model):
    # with gradient checkpointing: the backward recomputes the layers inside the same split (the engine's scope)
    _same_steps(tmp_path, model, ["fsdp2_gc=trainer.backend=fsdp2,trainer.gradient_checkpointing=true"], dp=2)
