"""A job SIGKILLed after a checkpoint and resumed ends with exactly the per-step losses of an uninterrupted run
with the same seed (model, optimizer, schedule, RNG and data position all restored). The killed job runs through
the real CLI in its own process group, attached to the test session's Ray cluster (as a job on a shared
cluster would be: the killed driver's actors and placement groups go with it, and no reaper watches it); the
resuming rlhf-run finds the MLflow run the killed one left RUNNING, ends it FAILED, then continues it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlhf.launch.job import run
from rlhf.launch.plan import plan
from rlhf.pipelines.checkpoint import CheckpointManager
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

STEPS, SAVE_EVERY = 16, 4
OVERRIDES = [
    f"trainer.max_steps={STEPS}",
    f"checkpoint.save_steps={SAVE_EVERY}",
    "checkpoint.max_keep=2",
    "eval.steps=1000",  # evaluate only at the end: keeps the steps short
]


def _cli(run_dir: Path) -> list[str]:
    import ray
    from tiny_shapes import TWO_RANKS

    address = ray.get_runtime_context().gcs_address
    return [
        sys.executable,
        "-m",
        "rlhf.cli.run",
        "+recipe=sft_tiny_cpu",
        f"hydra.run.dir={run_dir}",
        f"ray.address={address}",
        *TWO_RANKS,
        *OVERRIDES,
        "logging.mlflow=true",  # a store in the test's folder
    ]


def _losses(run_dir: Path) -> dict[int, float]:
    return {int(r["step"]): r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r}


def _wait_for_checkpoint(proc: subprocess.Popen, root: Path, timeout_s: float = 240.0) -> int:
    deadline = time.time() + timeout_s
    manager = CheckpointManager(root)
    while time.time() < deadline:
        latest = manager.latest()
        if latest is not None:
            return manager.driver_state(latest)["step"]
        if proc.poll() is not None:
            pytest.fail(f"the job ended (rc={proc.returncode}) before its first checkpoint")
        time.sleep(0.02)
    pytest.fail("no checkpoint within the time limit")


def test_sigkill_after_checkpoint_then_resume_matches_uninterrupted(ray_cluster, tiny_spec, tmp_path):
    killed = tmp_path / "killed"
    log = open(tmp_path / "killed.log", "w")
    proc = subprocess.Popen(
        _cli(killed),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    step = _wait_for_checkpoint(proc, killed / "checkpoints")
    still_running = proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)  # the driver (and anything it started); Ray reaps its actors
    proc.wait()
    assert still_running, "the job finished before it could be killed"
    assert step < STEPS

    # Resume: the same command in the same run directory (checkpoint.resume=auto).
    done = subprocess.run(
        _cli(killed),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed from" in done.stderr
    assert f"the previous attempt in {killed} ended without finishing" in done.stderr
    assert "mlflow marked FAILED" in done.stderr
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("rlhf").experiment_id])  # the same run, continued
    assert found.info.status == "FINISHED"
    assert "found by the next rlhf-run in this folder" in found.data.tags["rlhf.end_reason"]

    # The uninterrupted reference run, in this process.
    spec = tiny_spec("sft_tiny_cpu", *OVERRIDES)
    run(spec, plan(spec), tmp_path / "straight")

    resumed, straight = _losses(killed), _losses(tmp_path / "straight")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    assert [resumed[s] for s in range(1, STEPS + 1)] == [straight[s] for s in range(1, STEPS + 1)]
    kept = [p.name for _, p in CheckpointManager(killed / "checkpoints").complete()]
    assert kept == [f"step{s:08d}" for s in (STEPS - SAVE_EVERY, STEPS)]  # rotation kept the newest two
