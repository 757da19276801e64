"""A job SIGKILLed after a checkpoint and resumed ends with exactly the per-step losses of an uninterrupted run
with the same seed (model, optimizer, schedule, RNG and data position all restored). The killed job runs through
the real CLI in its own process group, one process on the local executor; its reaper (its own session, which the
kill does not reach) ends the MLflow run it left RUNNING, FAILED, and the resuming rlhf-run continues that run.
(A job on a Ray cluster resumed bit-equal: tests/pipelines/test_fsdp2_pipelines.py, two ranks.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

STEPS, SAVE_EVERY = 8, 2
OVERRIDES = [
    f"trainer.max_steps={STEPS}",
    f"checkpoint.save_steps={SAVE_EVERY}",
    "checkpoint.max_keep=2",
    "eval.steps=1000",  # evaluate only at the end: keeps the steps short
]


def _cli(run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rlhf.cli.run",
        "+recipe=sft_tiny_cpu",
        f"hydra.run.dir={run_dir}",
        *OVERRIDES,
        "logging.mlflow=true",  # a store in the test's folder
        "logging.progress=false",
    ]


def _losses(run_dir: Path) -> dict[int, float]:
    return {int(r["step"]): r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r}


def _wait_for_checkpoint(proc: subprocess.Popen, root: Path) -> int:
    manager = CheckpointManager(root)
    latest = wait_until(manager.latest, "the job's first checkpoint", 240, alive=lambda: proc.poll() is None)
    return manager.driver_state(latest)["step"]


def test_sigkill_after_checkpoint_then_resume_matches_uninterrupted(tmp_path):
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
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, all of the job: nothing of it gets to clean up
    proc.wait()
    assert still_running, "the job finished before it could be killed"
    assert step < STEPS
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")

    def status() -> str:
        (found,) = client.search_runs([client.get_experiment_by_name("rlhf").experiment_id])
        return found.info.status

    wait_until(lambda: status() == "FAILED", "the reaper ending the killed run FAILED", 120)

    # Resume: the same command in the same run directory (checkpoint.resume=auto).
    done = subprocess.run(
        _cli(killed),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        timeout=ceiling(600),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed from" in done.stderr
    (found,) = client.search_runs([client.get_experiment_by_name("rlhf").experiment_id])  # the same run, continued
    assert found.info.status == "FINISHED"
    assert "found by the reaper" in found.data.tags["rlhf.end_reason"]

    # The uninterrupted reference run, in this process (the local executor too).
    spec = load_spec(["+recipe=sft_tiny_cpu", *OVERRIDES, "logging.mlflow=false", "logging.progress=false"])
    run(spec, plan(spec), tmp_path / "straight")

    resumed, straight = _losses(killed), _losses(tmp_path / "straight")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    assert [resumed[s] for s in range(1, STEPS + 1)] == [straight[s] for s in range(1, STEPS + 1)]
    kept = [p.name for _, p in CheckpointManager(killed / "checkpoints").complete()]
    assert kept == [f"step{s:08d}" for s in (STEPS - SAVE_EVERY, STEPS)]  # rotation kept the newest two
