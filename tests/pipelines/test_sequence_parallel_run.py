"""``rlhf-run`` of the tiny GRPO recipe with ``trainer.sequence_parallel_size=2`` on two policy ranks (Ray, the
reference fused into the policy's processes, a reward with spread from a python file, an entropy bonus) completes,
and its first step is the one the same run takes without sequence parallelism (two data-parallel ranks: the same
global batch and the same micro-batches): the same policy loss, entropy and gradient norm. The pipelines hand every
rank of an SP group the same micro-batches (rlhf.launch.role_calls.RoleCalls.run_per_rank) and cut them per
data-parallel rank; the engines split each micro-batch's row between the ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = [pytest.mark.slow, pytest.mark.ray]

BIN = Path(sys.executable).parent
REWARD = (
    "import torch\n"
    "def reward_func(queries, prompts, labels, **kw):\n"
    "    r = torch.tensor([float(len(q) % 2) for q in queries])\n"
    "    return {'rewards': r, 'scores': r}\n"
)
RUN = [
    "+recipe=grpo_tiny_cpu",
    "hardware.devices_per_node=2",
    "rollout.num_engines=2",
    "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=8",
    "trainer.max_steps=1",
    "eval.steps=0",
    "logging.mlflow=false",
    "logging.progress=false",
    "reward.verifier=",
    "algorithm.policy_loss.entropy_coef=0.01",
]
SAME = ("train/policy_loss", "train/entropy_loss", "train/kl_loss", "train/actor_grad_norm", "train/reward")


def _first_step(tmp_path: Path, sp: int, reward: Path) -> dict:
    run_dir = tmp_path / f"sp{sp}"
    done = subprocess.run(
        [
            str(BIN / "rlhf-run"),
            *RUN,
            f"reward.function={reward}",
            f"trainer.sequence_parallel_size={sp}",
            f"hydra.run.dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=ceiling(600),
    )
    assert done.returncode == 0, f"sp={sp}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "executor: ray" in done.stdout + done.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/reward" in r]
    assert [s["step"] for s in steps] == [1] and (run_dir / "model" / "config.json").is_file()
    return steps[0]


def test_grpo_with_two_sequence_parallel_ranks_runs_and_takes_the_unsplit_first_step(tmp_path):
    reward = tmp_path / "parity.py"
    reward.write_text(REWARD)
    split, unsplit = _first_step(tmp_path, 2, reward), _first_step(tmp_path, 1, reward)
    assert unsplit["train/policy_loss"] != 0 and unsplit["train/actor_grad_norm"] > 0  # a step that moves
    for key in SAME:
        assert split[key] == pytest.approx(unsplit[key], rel=1e-5, abs=1e-7), (key, split[key], unsplit[key])
