"""trainer.backend=fsdp2 end to end on CPU with two ranks, through real Ray, the rollout engines and the CLI:

* SFT and GRPO take the same steps under FSDP2 as under DeepSpeed ZeRO-3 (per-step losses compared);
* an FSDP2 SFT job SIGKILLed after a checkpoint and resumed ends bit-equal to an uninterrupted one;
* DPO, PPO (policy, critic, reference, weight sync to the hf engines) and RM train under FSDP2.

The commands are the README's (``rlhf-run +recipe=NAME trainer.backend=fsdp2``), attached to the session's Ray
cluster. Tolerances: FSDP2 and ZeRO-3 compute the same sums in a different order only in the gradient norm (hence the
clipping factor), so the step losses agree to about 1e-7 relative (tests/backends/test_train_backends.py measures it
on the engines alone); a run adds its own fp32 rounding over a few steps, hence 1e-5 here.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until
from tiny_shapes import TWO_RANKS

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

FSDP2 = "trainer.backend=fsdp2"
ZERO3 = ["trainer.backend=deepspeed", "trainer.zero_stage=3"]
SFT_STEPS, SAVE_EVERY = 6, 2
SFT = [f"trainer.max_steps={SFT_STEPS}", f"checkpoint.save_steps={SAVE_EVERY}", "eval.steps=1000"]
# GRPO with a reward that varies within each group (sequence-length parity), two optimizer steps per rollout: the
# losses, gradient norms and KL carry signal from the first step.
GRPO = [
    "trainer.max_steps=3",
    "rollout.prompts_per_step=8",
    "eval.steps=0",
    "reward.verifier=",
]
PARITY = "def reward_func(queries, prompts, labels, **kw):\n    return [float(len(q) % 2) for q in queries]\n"


def _cli(recipe: str, run_dir: Path, *overrides: str) -> list[str]:
    import ray

    address = ray.get_runtime_context().gcs_address
    return [
        sys.executable,
        "-m",
        "rlhf.cli.run",
        f"+recipe={recipe}",
        f"hydra.run.dir={run_dir}",
        f"ray.address={address}",
        *TWO_RANKS,
        *overrides,
    ]


def _rlhf_run(recipe: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        _cli(recipe, run_dir, *overrides), capture_output=True, text=True, cwd=run_dir.parent, timeout=ceiling(900)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _in_process(recipe: str, run_dir: Path, *overrides: str) -> dict:
    spec = load_spec([f"+recipe={recipe}", *TWO_RANKS, *overrides])
    return run(spec, plan(spec), run_dir)


def _per_step(run_dir: Path, key: str) -> list[float]:
    """``key`` of every logged step, in step order (a resumed run's rewound steps counted once)."""
    by_step = {int(r["step"]): r[key] for r in read_metrics(run_dir) if key in r}
    return [by_step[s] for s in sorted(by_step)]


def test_sft_fsdp2_matches_zero3_and_resumes_bit_equal_after_a_kill(ray_cluster, tmp_path):
    from transformers import AutoModelForCausalLM

    killed = tmp_path / "killed"
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(
            _cli("sft_tiny_cpu", killed, FSDP2, *SFT),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        manager = CheckpointManager(killed / "checkpoints")
        try:
            wait_until(manager.latest, "the job's first checkpoint", 600, alive=lambda: proc.poll() is None)
        except AssertionError:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        step = manager.driver_state(manager.latest())["step"]
        running = proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started; Ray reaps its actors
        proc.wait()
    assert running and step < SFT_STEPS
    resumed = _rlhf_run("sft_tiny_cpu", killed, FSDP2, *SFT)  # the same command, same folder: checkpoint.resume=auto
    assert "resumed from" in resumed.stderr

    straight = _in_process("sft_tiny_cpu", tmp_path / "straight", FSDP2, *SFT)
    _in_process("sft_tiny_cpu", tmp_path / "zero3", *ZERO3, *SFT)

    losses = {name: _per_step(tmp_path / name, "train/loss") for name in ("killed", "straight", "zero3")}
    assert len(losses["straight"]) == SFT_STEPS
    assert losses["killed"] == losses["straight"], "the resumed FSDP2 run ends bit-equal to the uninterrupted one"
    assert losses["straight"] == pytest.approx(losses["zero3"], rel=1e-5)
    evals = _per_step(tmp_path / "straight", "eval/loss")
    assert evals[-1] < evals[0]  # it learns
    AutoModelForCausalLM.from_pretrained(straight["model_dir"])  # the HF export loads with plain transformers


def test_grpo_fsdp2_matches_zero3(ray_cluster, tmp_path):
    reward = tmp_path / "parity.py"
    reward.write_text(PARITY)
    extra = [*GRPO, f"reward.function={reward}"]
    (tmp_path / "fsdp2").mkdir()
    # FSDP2's buckets over the broadcast route (gloo; tensors straight from the gathered DTensors); PPO below takes
    # the shared-memory route (auto).
    _rlhf_run("grpo_tiny_cpu", tmp_path / "fsdp2", FSDP2, *extra, "rollout.weight_sync=broadcast")
    _in_process("grpo_tiny_cpu", tmp_path / "zero3", *ZERO3, *extra)

    def steps(name: str) -> list[dict]:
        return [r for r in read_metrics(tmp_path / name) if "train/reward" in r]

    fs, ds = steps("fsdp2"), steps("zero3")
    assert [s["step"] for s in fs] == [1, 2, 3]
    # The engines sample what the trainer holds: FSDP2's bucket-by-bucket weight sync delivered the weights.
    assert all(s["train/logprobs_diff"] < 1e-3 for s in fs)
    for a, b in zip(fs, ds, strict=True):
        assert a["train/reward"] == b["train/reward"]  # the same samples (the weights agree to rounding)
        assert a["train/actor_grad_norm"] > 0
        assert a["train/actor_grad_norm"] == pytest.approx(b["train/actor_grad_norm"], rel=1e-5)
        assert a["train/policy_loss"] == pytest.approx(b["train/policy_loss"], rel=1e-5, abs=1e-7)
        assert a["train/kl"] == pytest.approx(b["train/kl"], rel=1e-4, abs=1e-9)


@pytest.mark.parametrize("recipe", ["dpo_tiny_cpu", "ppo_tiny_cpu"])
def test_dpo_and_ppo_train_under_fsdp2(ray_cluster, tmp_path, recipe):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if recipe == "dpo_tiny_cpu":
        _rlhf_run(recipe, run_dir, FSDP2, "trainer.max_steps=3")
        losses = _per_step(run_dir, "train/loss")
        # The sharded policy and its sharded frozen reference start as the same model: DPO's first loss is log 2.
        assert losses[0] == pytest.approx(math.log(2), abs=1e-5)
        assert _per_step(run_dir, "eval/loss")[-1] < math.log(2) and _per_step(run_dir, "eval/acc")[-1] > 0.5
    else:
        _rlhf_run(recipe, run_dir, FSDP2, "trainer.max_steps=2", "eval.steps=0")
        steps = [r for r in read_metrics(run_dir) if "train/reward" in r]
        assert [s["step"] for s in steps] == [1, 2]
        assert all(math.isfinite(s["train/critic_loss"]) and s["train/critic_grad_norm"] > 0 for s in steps)
        assert steps[-1]["train/logprobs_diff"] < 1e-3
    assert (run_dir / "model" / "model.safetensors").is_file()


def test_rm_trains_under_fsdp2(ray_cluster, tmp_path):
    import json

    from transformers import AutoModelForSequenceClassification

    result = _in_process("rm_tiny_cpu", tmp_path, FSDP2, "trainer.max_steps=3")
    final = result["final_metrics"]
    cfg = json.loads((tmp_path / "model" / "config.json").read_text())
    assert cfg["mean"] == pytest.approx(final["eval/reward_mean"])  # the value model's statistics for RL
    model = AutoModelForSequenceClassification.from_pretrained(result["model_dir"])
    assert model.score.weight.shape == (1, model.config.hidden_size)
    assert all(math.isfinite(v) for v in _per_step(tmp_path, "train/loss"))
