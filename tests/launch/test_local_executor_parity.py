"""A one-process job gives the same numbers on the local executor as on Ray: GRPO (an hf engine beside the policy,
a weight sync between them every step), GRPO with LoRA adapters synced alone (the engine, built beside the trainer,
draws its adapter's init from the process's generator: the local executor keeps the trainer's draws as they would be
in a process of their own), SFT and DPO, each trained for a few steps both ways from the same seed; every per-step
loss (and the RL rewards, KL and gradient norms) agree to 1e-6. Ray is started here, so this lives in the Ray
tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.spec import check
from rlhf.spec.build import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.ray]

QUIET = ["logging.mlflow=false", "logging.progress=false", "checkpoint.save_steps=0"]
CASES = {
    "grpo": ["+recipe=grpo_tiny_cpu", "trainer.max_steps=3", "rollout.prompts_per_step=8", "eval.steps=0"],
    "grpo_lora_adapter": [
        "+recipe=grpo_tiny_cpu", "trainer.max_steps=3", "rollout.prompts_per_step=8", "eval.steps=0",
        "model.lora.rank=8", "model.lora.alpha=16", "rollout.weight_sync_lora=adapter", "trainer.lr=5e-3",
    ],
    "sft": ["+recipe=sft_tiny_cpu", "trainer.max_steps=4", "eval.steps=0"],
    "dpo": ["+recipe=dpo_tiny_cpu", "trainer.max_steps=4", "eval.steps=0"],
}
# What each step logs that the two executors must agree on (all that are present).
COMPARED = ("loss", "policy_loss", "kl_loss", "grad_norm", "actor_grad_norm", "reward", "kl", "chosen_reward")


def _steps(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("step", 0) > 0 and any(k.startswith("train/") for k in r)]


def _train(tmp_path: Path, overrides: list[str], executor: str) -> tuple[str, list[dict]]:
    spec = load_spec([*overrides, *QUIET, f"launch.executor={executor}"])
    check(spec)
    p = plan(spec)
    run_dir = tmp_path / executor
    run(spec, p, run_dir)
    return p.executor, _steps(run_dir)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_process_job_gives_the_same_per_step_losses_on_local_and_on_ray(tmp_path, case):
    local_name, local = _train(tmp_path, CASES[case], "local")
    ray_name, on_ray = _train(tmp_path, CASES[case], "ray")
    assert (local_name, ray_name) == ("local", "ray")
    assert len(local) == len(on_ray) >= 3
    compared = 0
    for a, b in zip(local, on_ray, strict=True):
        assert a["step"] == b["step"]
        for key in a:
            if key.startswith("train/") and key.rsplit("/", 1)[-1] in COMPARED:
                assert key in b, f"step {a['step']}: {key} logged on local only"
                assert a[key] == pytest.approx(b[key], abs=1e-6, rel=1e-6), f"step {a['step']} {key}"
                compared += 1
    assert compared >= 2 * len(local), f"only {compared} values compared: the metric names changed?"
