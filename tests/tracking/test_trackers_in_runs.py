"""``rlhf-run logging.trackers=[mlflow,tensorboard,wandb]`` (W&B offline) as a user runs it, killed with SIGKILL
after a step its last checkpoint does not hold and run again: every tracker holds the metrics of metrics.jsonl,
same names, same steps, same values, each step once, and the end summary prints where each one keeps the run.

Where it is killed is certain, not raced: the run (one process) stops itself in step 4's optimizer step (the fault
point rank.stop_on_train_step), after step 3 went to the trackers and before step 4's checkpoint; then the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until
from readers import READERS, records

from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow
pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

BIN = Path(sys.executable).parent
STEPS = 5
TRACKERS = ("mlflow", "tensorboard", "wandb")
RUN = [
    "+recipe=grpo_tiny_cpu",
    f"trainer.max_steps={STEPS}",
    "checkpoint.save_steps=2",
    "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=16",
    "eval.steps=5",  # step 0 and step 5: eval/* metrics beside train/*
    "eval.max_prompts=4",
    "eval.samples_per_prompt=2",
    "logging.progress=false",
    f"logging.trackers=[{','.join(TRACKERS)}]",
]


def _command(tmp_path: Path, run_dir: Path) -> list[str]:
    return [
        str(BIN / "rlhf-run"),
        *RUN,
        f"logging.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"hydra.run.dir={run_dir}",
    ]


def _held_by_mlflow(run_dir: Path) -> int:
    try:
        return int(records(run_dir)["mlflow"]["last_step"])
    except (FileNotFoundError, KeyError, ValueError):  # not written yet (or being replaced)
        return -1


def _logged_steps(run_dir: Path) -> set[int]:
    return {int(r["step"]) for r in read_metrics(run_dir) if "train/reward" in r}


def test_three_trackers_hold_the_same_metrics_and_a_killed_run_resumed_repeats_no_step(tmp_path):
    import psutil

    run_dir = tmp_path / "run"
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    env.pop("RLHF_FAULTS", None)
    manager = CheckpointManager(run_dir / "checkpoints")
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(
            _command(tmp_path, run_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={**env, "RLHF_FAULTS": "rank.stop_on_train_step:4"},  # one optimizer step per RL step
            start_new_session=True,
        )
        stopped = lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED  # noqa: E731
        try:
            wait_until(stopped, "the run stopping itself in step 4", 600, alive=lambda: proc.poll() is None)
        except AssertionError as e:
            raise AssertionError(f"{e}: {(tmp_path / 'killed.log').read_text()[-3000:]}") from None
        # a checkpoint at step 2, and step 3 sent to the trackers: the resumed run redoes step 3, which MLflow and
        # TensorBoard hold (W&B may not have written it yet: then it gets it from the resumed run)
        assert manager.latest() is not None and _held_by_mlflow(run_dir) == 3
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = CheckpointManager.step_of(manager.latest())
    redone = {s for s in _logged_steps(run_dir) if s > saved}
    assert saved == 2 and 3 in redone

    done = subprocess.run(
        _command(tmp_path, run_dir), capture_output=True, text=True, cwd=tmp_path, env=env, timeout=ceiling(900)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"at step {saved}" in done.stderr
    for name in TRACKERS:  # the end summary names each tracker's place
        assert any(line.startswith(f"  {name}:") for line in done.stderr.splitlines()), done.stderr[-2000:]

    rows = read_metrics(run_dir)
    want = {int(r["step"]): {k: v for k, v in r.items() if k != "step"} for r in rows}
    assert sorted(want) == list(range(0, STEPS + 1)) and len(rows) == len(want)
    assert any(k.startswith("eval/") for k in want[0]) and any(k.startswith("eval/") for k in want[STEPS])
    kept = records(run_dir)
    assert sorted(kept) == sorted(TRACKERS)
    for name in TRACKERS:
        held = READERS[name].read(kept[name], run_dir, "")
        assert not held.repeated(), (name, held.repeated())
        got = held.steps()
        assert sorted(got) == sorted(want), name
        for step, metrics in want.items():
            if step in redone:  # held from the killed attempt: the same numbers, but its own timings and rates
                assert set(got[step]) == set(metrics), (name, step)
                metrics = {k: v for k, v in metrics.items() if "/timing/" not in k and k != "train/tokens_per_s"}
                got[step] = {k: got[step][k] for k in metrics}
            assert got[step] == pytest.approx(metrics, rel=1e-9, nan_ok=True), (name, step)
        assert held.status == "FINISHED", name
