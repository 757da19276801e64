"""A stalled role in a real GRPO run (Ray, DeepSpeed with two ranks, the hf engine): a rollout engine (in generation,
in a broadcast weight sync) and a training rank that SIGSTOP their own process mid-call are found by the heartbeat
within trainer.heartbeat_timeout_s, named with pid, node and what they were doing, killed and restarted (the engine
in place, the rank with every actor from the last checkpoint); the run finishes and ``train/restarts`` counts it.
Before the heartbeat, the stopped engine held the driver for rollout.weight_sync_timeout_s / trainer.remote_timeout_s
(600 s / 1800 s) with no output."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from tiny_shapes import TWO_RANKS

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

HEARTBEAT_S = 5
STEPS = 2  # every stall below comes in step 1 or 2; the run then finishes step 2 after the restart
BASE = [
    "+recipe=grpo_tiny_cpu",
    *TWO_RANKS,
    f"trainer.max_steps={STEPS}",
    "rollout.prompts_per_step=8",
    "checkpoint.save_steps=1",
    "eval.steps=0",
    f"trainer.heartbeat_timeout_s={HEARTBEAT_S}",
]


def _stopped_run(tmp_path: Path, monkeypatch, point: str, *overrides: str) -> tuple[dict, str]:
    once = tmp_path / "once"
    once.mkdir()
    monkeypatch.setenv("RLHF_FAULTS", point)
    monkeypatch.setenv("RLHF_FAULTS_ONCE_DIR", str(once))
    spec = load_spec([*BASE, *overrides])
    pid_file = once / f"{point.partition(':')[0]}.pid"
    try:
        return run(spec, plan(spec), tmp_path / "run"), pid_file.read_text()
    finally:
        if pid_file.exists():  # the process this test stopped: never left behind, whatever happened
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(int(pid_file.read_text()), sig)
                except ProcessLookupError:
                    pass


def _restarts(run_dir: Path) -> dict[int, float]:
    return {int(r["step"]): r["train/restarts"] for r in read_metrics(run_dir) if "train/restarts" in r}


def _the_restart(capfd, run_dir: Path, result: dict, pattern: str, at: int = 2) -> tuple[str, str]:
    """The one restart line of the run (matching ``pattern``: a stall, found by the heartbeat no sooner than its
    timeout, not a call's deadline passing), and the run's whole stderr; the run finished with that one restart
    counted from step ``at`` on."""
    err = capfd.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("restart 1/")]
    print(line)
    assert re.search(pattern, line), line
    detected = int(re.search(r"no answer to a heartbeat for (\d+) s", line).group(1))
    assert detected >= HEARTBEAT_S
    assert result["restarts"] == 1 and result["steps"] == STEPS
    assert _restarts(run_dir) == {s: float(s >= at) for s in range(1, STEPS + 1)}
    return line, err


def test_a_stopped_rollout_engine_is_found_by_its_heartbeat_and_restarted_in_place(
    ray_cluster, tmp_path, monkeypatch, capfd
):
    # generate calls: step 1, the weight-sync probe after step 1's sync, step 2 (stops)
    result, pid = _stopped_run(tmp_path, monkeypatch, "engine.stop_on_generate:3")
    line, _ = _the_restart(
        capfd, tmp_path / "run", result, rf"rollout engine 0 \(hf, pid {pid}\) stalled during generate: no answer"
    )
    assert f"pid {pid} on node 127.0.0.1" in line and "its last answer" in line and "its process is killed" in line


def test_an_engine_stopped_mid_weight_sync_is_found_by_its_heartbeat_not_after_the_sync_timeout(
    ray_cluster, tmp_path, monkeypatch, capfd
):
    # issue 21: this stop used to hold the driver in WeightSync.sync for rollout.weight_sync_timeout_s (600 s); the
    # first sync (v1) is step 1's
    overrides = ("rollout.weight_sync=broadcast", "rollout.weight_sync_bucket_mb=0.25")
    result, pid = _stopped_run(tmp_path, monkeypatch, "sync.stop_after_bucket:2", *overrides)
    _the_restart(
        capfd, tmp_path / "run", result, rf"rollout engine 0 \(hf, pid {pid}\) stalled during weight sync v1: no", 1
    )


def test_a_stopped_training_rank_is_found_by_its_heartbeat_and_every_actor_restarted(
    ray_cluster, tmp_path, monkeypatch, capfd
):
    # two optimizer steps per RL step: the third is step 2's first; step 1's checkpoint is where it restarts from
    result, pid = _stopped_run(tmp_path, monkeypatch, "rank.stop_on_train_step:3")
    line, err = _the_restart(capfd, tmp_path / "run", result, r"role policy rank [01] stalled during train_step: no")
    assert f"pid {pid} on node 127.0.0.1" in line
    assert "restarted every actor from" in err
