"""Two runs into one folder (the same hydra.run.dir, or --resume of a run still going): the second is refused in
its first second, before it imports torch or Ray, naming the first's pid, and writes nothing there; the first goes
on untouched, each step logged once. Then a --resume whose override fails before the run starts leaves the run's
command as it was (what the next --resume repeats)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ceilings import ceiling, wait_until
from run_helpers import TINY_RUN, without_modules

from rlhf.pipelines.folder_lock import check_free
from rlhf.tracking.tracker import read_metrics

BIN = Path(sys.executable).parent
RUN = [*TINY_RUN, "trainer.max_steps=200", "checkpoint.save_steps=0"]



def _steps(run_dir: Path) -> list[int]:
    return [int(r["step"]) for r in read_metrics(run_dir) if "train/reward" in r]


def test_a_second_run_into_a_held_folder_is_refused_at_once_and_a_failed_resume_keeps_the_runs_command(tmp_path):
    run_dir = tmp_path / "run"
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115 - closed with the process
    first = subprocess.Popen(
        [str(BIN / "rlhf-run"), *RUN, f"hydra.run.dir={run_dir}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        start_new_session=True,
    )
    wait_until(lambda: len(_steps(run_dir)) >= 1, "the first run's first step", 300, alive=lambda: first.poll() is None)
    recorded = (run_dir / "command.json").read_bytes()
    blocked = without_modules(tmp_path, "torch", "ray", "transformers")  # refused before the imports a run needs
    for second in ([*RUN, f"hydra.run.dir={run_dir}"], ["--resume", str(run_dir)]):
        r = subprocess.run(
            [str(BIN / "rlhf-run"), *second],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=blocked,
            timeout=ceiling(60),
        )
        assert r.returncode == 2, r.stderr[-3000:]
        assert f"{run_dir} is in use by another run (pid {first.pid})" in r.stderr, r.stderr[-3000:]
        assert "Traceback" not in r.stderr
    assert (run_dir / "command.json").read_bytes() == recorded  # the refused runs wrote nothing there
    assert first.poll() is None  # the first is still training

    os.killpg(first.pid, signal.SIGINT)
    assert first.wait(timeout=ceiling(120)) == 130
    out = (tmp_path / "first.log").read_text()
    steps = _steps(run_dir)
    assert steps == list(range(1, len(steps) + 1)), steps  # each step once, in order
    assert f"interrupted at step {steps[-1]}" in out
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs(client.get_experiment_by_name("rlhf").experiment_id)
    assert len(runs) == 1  # no second MLflow run was opened
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/reward")] == steps
    check_free(run_dir)  # released with the first run's end
    assert json.loads(recorded)["argv"][0] == "+recipe=grpo_tiny_cpu"

    # --resume with an override that fails before the run starts (another model: refused by the resume's rules)
    empty = tmp_path / "no_weights"
    empty.mkdir()
    (empty / "config.json").write_text('{"model_type": "llama"}')
    bad = ["model.make_local=false", f"model.path={empty}"]
    r = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir), *bad],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=ceiling(300),
    )
    assert r.returncode != 0, r.stderr[-3000:]
    assert (run_dir / "command.json").read_bytes() == recorded  # not what the next --resume repeats
    assert not set(bad) & set(json.loads((run_dir / "command.json").read_text())["argv"])
