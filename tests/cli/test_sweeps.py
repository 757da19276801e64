"""Sweeps as a user runs them, through real sweeper and launcher plugins: every job is an ordinary Hydra job that
writes its record (job.json) and returns its objective."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

# Two steps of the tiny recipe on a few prompts, an eval at the end (the objective), no reference model, quiet.
TINY_JOB = [
    "+recipe=grpo_tiny_cpu",
    "trainer.max_steps=2",
    "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "rollout.max_new_tokens=4",
    "rollout.micro_batch_per_device=16",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=16",
    "algorithm.kl.coef=0",
    "eval.steps=2",
    "eval.max_prompts=4",
    "eval.samples_per_prompt=2",
    "logging.progress=false",
]


def rlhf_run(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [str(BIN / "rlhf-run"), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def records(cwd: Path) -> list[dict]:
    found = [json.loads(p.read_text()) for p in (cwd / "multirun").glob("**/job.json")]
    return sorted(found, key=lambda r: r["num"])


# rlhf-run in a process that keeps the study Optuna made and writes its trials at exit (Optuna 2.x, which the
# Hydra plugin needs, cannot use a sqlite storage beside SQLAlchemy 2, so the study is read from the process itself).
STUDY_READER = """
import json, sys
import optuna
made = []
create_study = optuna.create_study
def keep(*args, **kwargs):
    made.append(create_study(*args, **kwargs))
    return made[-1]
optuna.create_study = keep
def dump():
    trials = [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params} for t in made[0].trials
    ]
    json.dump({"direction": made[0].direction.name, "trials": trials}, open(out, "w"))
from rlhf.cli.run import main
out = sys.argv[1]
sys.argv = ["rlhf-run", *sys.argv[2:]]
try:
    main()
finally:
    dump()
"""


def test_optuna_study_gets_each_trials_objective_and_an_invalid_trial_fails_alone(tmp_path):
    """... and the trials, run one after the other in the sweep's process, are grouped in every tracker."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    study_file = tmp_path / "study.json"
    args = [
        "-m",
        "hydra/sweeper=optuna",
        "hydra/sweeper/sampler=random",
        "hydra.sweeper.sampler.seed=2",  # draws lr 0.0021, -0.0036, 0.0037: the second trial is invalid
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.n_jobs=1",
        "trainer.lr=interval(-0.004,0.01)",
        "logging.trackers=[mlflow,tensorboard,wandb]",
        *TINY_JOB,
    ]
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    r = subprocess.run(
        [sys.executable, "-c", STUDY_READER, str(study_file), *args],
        capture_output=True,
        text=True,
        timeout=ceiling(600),
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    study = json.loads(study_file.read_text())
    trials = sorted(study["trials"], key=lambda t: t["number"])
    jobs = records(tmp_path)
    assert len(trials) == 3 and len(jobs) == 3  # the invalid trial did not end the study
    for trial, job in zip(trials, jobs, strict=True):
        lr = trial["params"]["trainer.lr"]
        assert f"trainer.lr={lr}" in job["overrides"]
        if lr > 0:
            assert trial["state"] == "COMPLETE" and job["status"] == "completed"
            assert job["objective_key"].endswith("_pass1")
            assert trial["value"] == pytest.approx(job["objective"])  # what the job returned is what Optuna got
        else:
            assert trial["state"] == "FAIL" and job["status"] == "failed"
            assert "trainer.lr" in job["error"] and "must be > 0" in job["error"]
    assert [t["state"] for t in trials].count("FAIL") == 1
    assert study["direction"] == "MAXIMIZE"  # sweep.direction's default reached Optuna
    done = [j for j in jobs if j["status"] == "completed"]
    assert all(sorted(j["trackers"]) == ["mlflow", "tensorboard", "wandb"] for j in done)
    _check_groups(tmp_path, jobs[0]["sweep"], [Path(j["run_dir"]) for j in done], ("mlflow", "tensorboard", "wandb"))


def test_submitit_local_launcher_runs_a_two_job_sweep(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    r = rlhf_run(
        "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15", "seed=1,2", *TINY_JOB, cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = records(tmp_path)
    assert [j["num"] for j in jobs] == [0, 1] and all(j["status"] == "completed" for j in jobs)
    assert len({j["pid"] for j in jobs}) == 2  # each in its own submitit process
    assert all(j["objective"] is not None and j["trackers"]["mlflow"].startswith("run ") for j in jobs)
    for j in jobs:
        assert (Path(j["run_dir"]) / "model" / "config.json").is_file()
        assert "done: rl 2 steps" in (Path(j["run_dir"]) / "console.log").read_text()
    sweep = jobs[0]["sweep"]
    assert sweep.startswith("multirun/") and all(j["sweep"] == sweep for j in jobs)
    _check_groups(tmp_path, sweep, [Path(j["run_dir"]) for j in jobs], ("mlflow",))  # jobs started at once


def _check_groups(cwd: Path, sweep: str, run_dirs: list[Path], trackers: tuple[str, ...]) -> None:
    """MLflow: one parent run for the sweep, closed FINISHED, the jobs its children; W&B: the sweep as every job's
    group; TensorBoard: each job in a sub-folder of <sweep folder>/tensorboard."""
    from mlflow import MlflowClient

    from rlhf.tracking.mlflow_tracker import PARENT_RUN_ID, PARENT_TAG
    from rlhf.tracking.tensorboard_tracker import scalar_events
    from rlhf.tracking.wandb_files import run_files

    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rlhf").experiment_id
    (parent,) = client.search_runs([exp], filter_string=f"tags.`{PARENT_TAG}` = '{sweep}'")
    children = client.search_runs([exp], filter_string=f"tags.`{PARENT_RUN_ID}` = '{parent.info.run_id}'")
    assert parent.info.status == "FINISHED"
    assert sorted(c.data.tags["rlhf.run_dir"] for c in children) == sorted(str(d) for d in run_dirs)
    for run_dir in run_dirs:
        doc = json.loads((run_dir / "tracking.json").read_text())["trackers"]
        assert sorted(doc) == sorted(trackers)
        if "wandb" in trackers:
            (attempt,) = run_files(run_dir / "wandb", doc["wandb"]["id"])
            assert attempt.group == sweep and attempt.exit_code == 0
        if "tensorboard" in trackers:
            folder = Path(doc["tensorboard"]["dir"])
            assert folder == (cwd / sweep / "tensorboard" / run_dir.name).resolve()
            assert {step for tag, step, _ in scalar_events(folder) if tag == "train/reward"} == {1, 2}
