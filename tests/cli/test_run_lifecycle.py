"""rlhf-run as a user meets it when things go wrong, in real subprocesses: Ctrl-C and SIGTERM stop at a step
boundary with a checkpoint, one line, exit 130 and an MLflow run marked KILLED, and ``--resume`` finishes the run;
a SIGTERM to the whole process group (``timeout``, SLURM, Kubernetes) does the same and leaves no process of the
group, and the same command typed again continues that run; ``--resume`` of a finished run says so without
importing Ray; a SIGKILLed driver leaves no Ray process behind, no warm-worker folder and its MLflow run FAILED;
default settings checkpoint, so a crash resumes; every socket of a run listens on loopback only (the local
executor's, and hf engines and two ranks on Ray; vLLM's: tests/pipelines/test_rl_pipeline.py's vLLM run); none of the
warnings that carry nothing for the user is printed.

The signals' story is the run lifecycle's, the same on both executors: the one-process run that is stopped three
ways runs on the local executor (default tier). What only Ray shows is in the Ray tier: a second Ctrl-C while Ray's
worker processes are stopped, and the SIGKILLed driver whose private cluster the reaper ends.

Each process start costs most of a test's time, so one run's processes prove several of these: one run is stopped
three times, each time another way (Ctrl-C to the group, the same command typed again then SIGTERM to the group,
``--resume`` then SIGTERM to the driver alone) before a last ``--resume`` finishes it with its sockets watched; the
crashed run is the SIGKILLed driver's, and the ``--resume`` that finishes it is the hf run whose sockets are
watched. Every wait is for an event, under a ceiling from tests/ceilings.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until
from run_helpers import TINY_RUN
from sockets_helper import listening_sockets_of

from rlhf.launch import worker_preload
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
RUN = TINY_RUN


# Printed by Ray, DeepSpeed and the raylet on every run before rlhf silenced them (rlhf.launch.cluster), and the gcc
# commands of DeepSpeed's libaio probe, which the local executor's process would print on the driver's console.
NOISE = (
    "Token authentication is enabled",
    "Setting accelerator to CPU",
    "A worker died or was killed",
    "[compilers.C.base]",
)


def _start(
    tmp_path: Path, run_dir: Path | None, *overrides: str, log_name: str = "", faults: str = ""
) -> subprocess.Popen:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    env.pop("RLHF_FAULTS", None)
    if faults:
        env["RLHF_FAULTS"] = faults
    pinned = [f"hydra.run.dir={run_dir}"] if run_dir is not None else []
    log = open(tmp_path / f"{log_name or run_dir.name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [str(BIN / "rlhf-run"), *RUN, *overrides, *pinned],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    wait_until(predicate, what, timeout, alive=lambda: proc.poll() is None)


def _steps_logged(run_dir: Path) -> int:
    return len([r for r in read_metrics(run_dir) if "train/reward" in r])


def _mlflow_runs(tmp_path: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client.search_runs(client.get_experiment_by_name("rlhf").experiment_id)


def _mlflow_status(tmp_path: Path) -> str:
    return _mlflow_runs(tmp_path)[0].info.status


def _without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing any of ``modules`` fails: a command that runs there provably imported none
    of them (``--resume`` of a finished run answers before composing a config or starting anything)."""
    root = tmp_path / "blocked"
    for name in modules:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text(f"raise ImportError('this command must not import {name}')\n")
    return dict(os.environ, PYTHONPATH=str(root))


def _group_members(pgid: int) -> list:
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def _interrupted(proc: subprocess.Popen, log: Path, run_dir: Path, tmp_path: Path) -> tuple[int, Path]:
    """The interrupted process's exit as a user sees it: 130, no traceback, one last line naming the step and the
    resume command, a checkpoint of that step, the MLflow run KILLED. Returns (step, checkpoint)."""
    rc = proc.wait(timeout=ceiling(120))
    out = log.read_text()
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    assert rc == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert last.startswith("interrupted at step ") and f"resume with: rlhf-run --resume {run_dir}" in last, last
    step = int(last.split("interrupted at step ")[1].split(";")[0])
    latest = CheckpointManager(run_dir / "checkpoints").latest()
    assert latest is not None and CheckpointManager.step_of(latest) == step and step >= 2
    assert _mlflow_status(tmp_path) == "KILLED"
    return step, latest


def test_ctrl_c_a_group_sigterm_and_a_sigterm_each_stop_at_a_checkpoint_and_the_run_continues_to_its_end(tmp_path):
    """One run, four processes, each stopped another way: (1) Ctrl-C, which a terminal sends to its whole foreground
    process group; (2) the same command typed again continues that run (no pinned folder: Hydra would make a new
    one), and gets SIGTERM to its whole group at once (`timeout`, SLURM, Kubernetes): stopped like a single one, one
    signal seen and nothing of the group left; (3) ``--resume`` continues it and gets SIGTERM to the driver alone
    (kill PID, a supervisor); (4) a second ``--resume`` finishes it, every socket it opens on loopback, and a third
    says so at once without importing Ray. The run is one process: the local executor's (the start-up line says
    so), which imports no Ray at all."""
    overrides = ("trainer.max_steps=30", "checkpoint.save_steps=0")
    found = lambda: list((tmp_path / "outputs").glob("grpo_tiny_cpu/*/metrics.jsonl"))  # noqa: E731

    # 1. Ctrl-C: SIGINT to the whole process group
    proc = _start(tmp_path, None, *overrides, log_name="first")  # Hydra's own folder under ./outputs
    _wait_for(lambda: bool(found()) and _steps_logged(found()[0].parent) >= 2, proc, "two steps")
    run_dir = found()[0].parent
    os.killpg(proc.pid, signal.SIGINT)
    step, latest = _interrupted(proc, tmp_path / "first.log", run_dir, tmp_path)
    out = (tmp_path / "first.log").read_text()
    assert "executor: local" in out and "import ray" not in out
    # the steps before the first step; none of the warnings that say nothing to the user
    assert "steps: 30, trainer.max_steps=30 (the data would give 62: 500 prompts / 8 per step" in out
    assert not [n for n in NOISE if n in out], out[-3000:]

    # 2. The same command again continues the interrupted run; SIGTERM to its whole process group stops it.
    proc = _start(tmp_path, None, *overrides, log_name="second")
    _wait_for(lambda: _steps_logged(run_dir) >= step + 1, proc, "a step after the continued start")
    os.killpg(proc.pid, signal.SIGTERM)
    again, latest_again = _interrupted(proc, tmp_path / "second.log", run_dir, tmp_path)
    out = (tmp_path / "second.log").read_text()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert f"continuing the interrupted run of this command in {run_dir.relative_to(tmp_path)}" in out
    assert f"resumed from {run_dir.resolve() / 'checkpoints' / f'step{step:08d}'} at step {step}" in out
    assert again > step
    assert "Failed to connect to GCS" not in out, out[-3000:]
    assert len([ln for ln in lines if ln.startswith("SIGTERM:")]) == 1  # one signal seen, not one per process
    wait_until(lambda: not _group_members(proc.pid), "nothing of the group left", 30)
    assert not [n for n in NOISE if n in out], out[-3000:]

    # 3. --resume continues it; SIGTERM to the driver alone stops it
    log = open(tmp_path / "resumed.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir)], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
    )
    _wait_for(lambda: _steps_logged(run_dir) >= again + 1, proc, "a step after the resume")
    os.kill(proc.pid, signal.SIGTERM)
    third, latest_third = _interrupted(proc, tmp_path / "resumed.log", run_dir, tmp_path)
    assert f"resumed from {latest_again} at step {again}" in (tmp_path / "resumed.log").read_text()
    assert third > again

    # 4. a second --resume finishes the run: one MLflow run, continued, in one folder; every socket on loopback
    log = open(tmp_path / "finished.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir), f"trainer.max_steps={third + 1}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    seen = _watch_sockets(proc)
    resumed = subprocess.CompletedProcess(proc.args, proc.returncode, "", (tmp_path / "finished.log").read_text())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_loopback_only(seen, at_least=2)  # the rank's rendezvous store and the weight sync's, in one process
    assert f"resumed from {latest_third} at step {third}" in resumed.stderr
    assert [r["step"] for r in read_metrics(run_dir) if "train/reward" in r] == list(range(1, third + 2))
    assert [r.info.status for r in _mlflow_runs(tmp_path)] == ["FINISHED"]
    assert len(list((tmp_path / "outputs").glob("grpo_tiny_cpu/*"))) == 1
    assert not [n for n in NOISE if n in resumed.stderr + resumed.stdout]

    # --resume of the finished run: said at once, without importing Ray (it cannot be imported here)
    done = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=ceiling(120),
        env=_without(tmp_path, "ray"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{run_dir.resolve()} finished all its {third + 1} steps" in done.stderr
    assert "nothing to resume" in done.stderr


@pytest.mark.ray
def test_on_ray_a_group_sigterm_stops_like_one_and_a_second_ctrl_c_ends_the_driver_while_workers_are_stopped(tmp_path):
    """What only a private Ray cluster shows, in one run and the same command again: (1) SIGTERM to the whole process
    group, Ray's GCS, raylet and actors included (`timeout`, SLURM, Kubernetes), stops at a checkpoint like a single
    SIGTERM: one signal seen, no lost connection to the GCS, nothing of the group left; (2) with every actor stopped
    (SIGSTOP: a wedged CUDA kernel, a swapped host), Ray's calls to them never end, so after a second Ctrl-C the driver
    can only leave by its own bound (rlhf.pipelines.interrupts.STOP_AT_ONCE_S), which says so."""
    import psutil

    run_dir = tmp_path / "run"
    ray = ("launch.executor=ray", "trainer.max_steps=200", "checkpoint.save_steps=0")
    proc = _start(tmp_path, run_dir, *ray, log_name="group")
    _wait_for(lambda: _steps_logged(run_dir) >= 2, proc, "two steps")
    assert any("raylet" in " ".join(p.cmdline()) for p in _group_members(proc.pid))  # Ray's processes are in it
    os.killpg(proc.pid, signal.SIGTERM)
    step, _ = _interrupted(proc, tmp_path / "group.log", run_dir, tmp_path)
    out = (tmp_path / "group.log").read_text()
    assert len([ln for ln in out.splitlines() if ln.startswith("SIGTERM:")]) == 1  # one signal, not one per process
    assert "Failed to connect to GCS" not in out and not [n for n in NOISE if n in out], out[-3000:]
    wait_until(lambda: not _group_members(proc.pid), "nothing of the group left", 30)

    proc = _start(tmp_path, run_dir, *ray)  # the same command again: continues that run
    log = tmp_path / "run.log"
    _wait_for(lambda: f"at step {step}" in log.read_text(), proc, "the continued start's resume line")
    _wait_for(lambda: _steps_logged(run_dir) > step, proc, "a step after the continued start")
    actors = [p for p in psutil.Process(proc.pid).children(recursive=True) if _is_actor(p)]
    assert actors, "no Ray actor process found under the driver"
    try:
        for p in actors:
            p.suspend()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole group, the stopped workers too
        wait_until(lambda: "SIGINT: stopping after this step" in log.read_text(), "the first Ctrl-C seen", 60)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=ceiling(60))  # a ceiling for a hang only: the bound itself is the message below
        out = log.read_text()
        assert rc == 130, out[-3000:]
        last = [ln for ln in out.splitlines() if ln.strip()][-1]
        assert "second SIGINT: stopped at once; abandoned the step under way (waiting on " in last, out[-2000:]
        assert "the trackers' runs are" in last  # as they record them: KILLED once ended, else the reaper's FAILED
        # what a stopped worker leaves is the reaper's: nothing of the run's processes stays
        wait_until(lambda: not any(_alive(p) for p in actors), "the stopped workers ended by the reaper", 60)
    finally:
        for p in actors:
            if _alive(p):
                p.kill()


def _is_actor(p) -> bool:
    try:
        return " ".join(p.cmdline()).startswith("ray::") and "IDLE" not in " ".join(p.cmdline())
    except Exception:  # noqa: BLE001 - gone meanwhile
        return False


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# Two data-parallel ranks beside two engines: a training group's and the weight sync's sockets, beside Ray's.
TWO_RANKS_TWO_ENGINES = ("hardware.devices_per_node=2", "rollout.num_engines=2", "trainer.micro_batch_per_device=8")


def _watch_sockets(proc: subprocess.Popen) -> dict[tuple[str, int], str]:
    """Every listening socket of ``proc`` and its descendants, polled until it exits: (address, port) -> process."""
    import psutil

    seen: dict[tuple[str, int], str] = {}

    def look() -> bool:
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return True
        for p in tree:
            try:
                name = " ".join(p.cmdline())[:60]
                for sock in listening_sockets_of(p.pid):
                    seen[sock] = name
            except psutil.Error:
                continue
        return proc.poll() is not None

    wait_until(look, "the run's end", 900)
    proc.wait()
    return seen


def _assert_loopback_only(seen: dict[tuple[str, int], str], at_least: int = 5) -> None:
    outside = {s: n for s, n in seen.items() if not s[0].removeprefix("::ffff:").startswith("127.")}
    assert len(seen) >= at_least and not outside, json.dumps({f"{a}:{p}": n for (a, p), n in outside.items()})


@pytest.mark.ray
def test_a_sigkilled_driver_leaves_no_ray_process_behind_its_run_failed_and_default_settings_resume_it(tmp_path):
    import psutil

    from rlhf.pipelines.attempt import read

    run_dir = tmp_path / "run"
    # default checkpoint settings (here every step): the crash below leaves step 1's checkpoint to resume from. Where
    # it comes is certain, not raced: both training ranks stop themselves (SIGSTOP) in step 2's first optimizer step
    # (the third: two per step), after step 1's checkpoint, and the driver is killed then.
    proc = _start(tmp_path, run_dir, "trainer.max_steps=2", *TWO_RANKS_TWO_ENGINES, faults="rank.stop_on_train_step:3")
    manager = CheckpointManager(run_dir / "checkpoints")

    def ranks_stopped() -> bool:
        actors = [p for p in psutil.Process(proc.pid).children(recursive=True) if _is_actor(p)]
        stopped = [p for p in actors if p.status() == psutil.STATUS_STOPPED]
        return len(stopped) >= 2

    _wait_for(ranks_stopped, proc, "both training ranks stopped in step 2")
    assert manager.latest() is not None and manager.driver_state(manager.latest())["step"] == 1
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any("raylet" in " ".join(p.cmdline()) for p in tree if p.is_running())
    # the reaper ends the cluster first, then the run in the trackers (importing MLflow), then itself
    reaper = [p for p in tree if "rlhf.launch.reaper" in " ".join(p.cmdline())]
    assert reaper, "no reaper under the driver"
    warm = list(Path(tempfile.gettempdir()).glob(worker_preload.folder_prefix(proc.pid) + "*"))
    assert warm, "no warm-worker folder of the driver"
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: nothing of it gets to clean up
    proc.wait()
    others = [p for p in tree if p not in reaper]
    wait_until(lambda: not any(_alive(p) for p in others), "the cluster's processes ended by the reaper", 60)
    # The reaper also ended the run the driver left RUNNING (MLflow's status, and the attempt's)
    wait_until(lambda: _mlflow_status(tmp_path) != "RUNNING", "the MLflow run ended by the reaper", 120)
    run = _mlflow_runs(tmp_path)[0]
    assert run.info.status == "FAILED" and "found by the reaper" in run.data.tags["rlhf.end_reason"]
    assert read(run_dir).status == "FAILED"
    wait_until(lambda: not any(_alive(p) for p in reaper), "the reaper's own end after its work", 60)
    assert not [f for f in warm if f.exists()], "the reaper left the driver's warm-worker folders"

    # The crash resumes from the default settings' checkpoint; this hf run's sockets are watched from start to end.
    step = manager.driver_state(manager.latest())["step"]
    log = open(tmp_path / "resumed.log", "w")  # noqa: SIM115 - closed with the process
    done = subprocess.Popen(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir)], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
    )
    seen = _watch_sockets(done)
    out = (tmp_path / "resumed.log").read_text()
    assert done.returncode == 0, out[-3000:]
    assert f"at step {step}" in out
    assert [r["step"] for r in read_metrics(run_dir) if "train/reward" in r] == list(range(1, 3))
    _assert_loopback_only(seen)
