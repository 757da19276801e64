"""Every registered tracker through the Tracker protocol, against its real store (an MLflow sqlite store,
TensorBoard event files, W&B offline run files, the console), read back from that store: what was sent is held,
once; a resumed run continues and repeats no step; a killed process loses nothing it held, the run it left open is
ended FAILED by a fresh tracker (once; a finished run is left alone), and the resumed one repeats nothing; a sweep's
jobs share one group."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from readers import READERS

from rlhf.spec.schema import ExperimentSpec, LoggingSpec, SweepSpec
from rlhf.tracking import registry
from rlhf.tracking.protocol import RunInfo, Tracker
from rlhf.tracking.tracker import run_info

NAMES = registry.names()
PERSISTENT = [n for n in NAMES if n in READERS and READERS[n].persistent]


def metrics(step: int) -> dict[str, float]:
    return {"train/loss": 1.0 / (step + 1), "train/reward": 0.1 * step - 0.05, "eval/add_pass1": step / 7}


def spec_for(db: Path, group: str = "") -> ExperimentSpec:
    logging = LoggingSpec(tracking_uri=f"sqlite:///{db}", progress=False)
    return dataclasses.replace(ExperimentSpec(), logging=logging, sweep=SweepSpec(id=group))


def info_for(db: Path, run_dir: Path, group: str = "") -> RunInfo:
    return run_info(spec_for(db, group), run_dir)


def read(name: str, record: dict, run_dir: Path, err: str = ""):
    return READERS[name].read(record, run_dir, err)


def assert_holds(held, steps: range) -> None:
    assert not held.repeated()
    got = held.steps()
    assert sorted(got) == list(steps)
    for step in steps:
        assert got[step] == pytest.approx(metrics(step), rel=1e-5)


def test_every_registered_tracker_has_a_reader_and_a_conf_file():
    from rlhf.spec.paths import conf_dir

    assert set(READERS) == set(NAMES), "add a reader for each registered tracker to tests/tracking/readers.py"
    for name in NAMES:
        assert (conf_dir() / "logging" / f"{name}.yaml").is_file(), f"conf/logging/{name}.yaml"


@pytest.mark.parametrize("name", NAMES)
def test_every_tracker_implements_the_protocol_with_its_signatures(name):
    tracker = registry.create(name)
    assert isinstance(tracker, Tracker)
    for method, _ in inspect.getmembers(Tracker, inspect.isfunction):
        if method.startswith("_"):
            continue
        want = list(inspect.signature(getattr(Tracker, method)).parameters)
        assert list(inspect.signature(getattr(type(tracker), method)).parameters) == want, method


@pytest.mark.parametrize("name", NAMES)
def test_a_tracker_holds_each_step_once_across_a_resume_with_params_artifacts_and_status(name, db, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = run_dir / "resolved_config.yaml"
    config.write_text("trainer:\n  lr: 0.001\n")
    info = info_for(db, run_dir)

    first = registry.create(name)
    assert first.start(info, None) is False  # a new run
    first.log_params({"trainer.lr": "0.001", "model.path": "builtin:tiny"})
    first.log_artifacts([config])
    for step in range(0, 4):
        first.log_metrics(metrics(step), step)
    assert first.last_step() == 3
    record = json.loads(json.dumps(first.record()))  # it travels through tracking.json and checkpoints
    first.finish("KILLED")
    first.finish("KILLED")  # idempotent
    assert registry.create(name).end_stale(record, "FAILED", "test") is False  # it ended: nothing to end

    again = registry.create(name)
    persistent = READERS[name].persistent
    assert again.start(info, record) is persistent  # the same run continued (the console keeps none)
    assert again.last_step() == (3 if persistent else -1)
    for step in range(2, 6):  # what the lifecycle does: a step the run holds is not sent again
        if step > again.last_step():
            again.log_metrics(metrics(step), step)
    assert again.location()
    again.finish("FINISHED")

    held = read(name, json.loads(json.dumps(again.record())), run_dir, capsys.readouterr().err)
    if not persistent:  # each process prints what it is given
        assert [s for s, m, _ in held.points if m == "train/loss"] == [0, 1, 2, 3, 2, 3, 4, 5]
        return
    assert_holds(held, range(0, 6))
    assert held.params["trainer.lr"] == "0.001" and held.params["model.path"] == "builtin:tiny"
    assert held.status == "FINISHED"
    if name in ("mlflow", "wandb"):
        assert "resolved_config.yaml" in held.files


PARAMS = {"trainer.lr": "0.001", "model.path": "builtin:tiny"}
KILLED_ATTEMPT = """
import json, os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[4], str(Path(sys.argv[4]).parent)]  # this folder, and tests/ (ceilings)
from test_conformance import PARAMS, info_for, metrics
from rlhf.tracking import registry
db, run_dir, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tracker = registry.create(name)
tracker.start(info_for(db, run_dir), None)
tracker.log_params(PARAMS)  # as the lifecycle does on a new run
for step in range(1, 4):
    tracker.log_metrics(metrics(step), step)
    (run_dir / "record.json").write_text(json.dumps(tracker.record()))  # as the lifecycle keeps tracking.json
os._exit(9)  # as SIGKILL would: no finish, no flush, no atexit
"""


@pytest.mark.parametrize("name", PERSISTENT)
def test_after_a_killed_process_the_resumed_run_repeats_no_step_and_misses_none(name, db, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_ATTEMPT, str(db), str(run_dir), name, here],
        capture_output=True,
        text=True,
        timeout=ceiling(300),
    )
    assert done.returncode == 9, done.stderr[-3000:]
    record = json.loads((run_dir / "record.json").read_text())

    # what the next rlhf-run in the folder, or the reaper, does: end the run the dead process left open
    assert registry.create(name).end_stale(record, "FAILED", "its driver died") is True
    assert read(name, record, run_dir).status == "FAILED"
    assert registry.create(name).end_stale(record, "FAILED", "its driver died") is False  # once

    resumed = registry.create(name)
    continued = resumed.start(info_for(db, run_dir), record)
    # W&B's killed attempt usually got nothing onto disk, its config included (see wandb_tracker): it answers False
    # so that the lifecycle logs the params again, as here; every other tracker held them
    assert continued or name == "wandb"
    if not continued:
        resumed.log_params(PARAMS)
    if name == "wandb":
        assert resumed.record()["id"] == record["id"]  # False or True, the same run goes on
    held_before = resumed.last_step()
    assert -1 <= held_before <= 3  # what the killed process got onto disk (W&B: usually nothing)
    for step in range(max(held_before + 1, 1), 6):
        resumed.log_metrics(metrics(step), step)
    resumed.finish("FINISHED")
    held = read(name, resumed.record(), run_dir)
    assert_holds(held, range(1, 6))
    assert {k: held.params.get(k) for k in PARAMS} == PARAMS
    assert held.status == "FINISHED"


@pytest.mark.parametrize("name", PERSISTENT)
def test_a_sweeps_jobs_share_one_group_that_no_single_run_has(name, db, tmp_path):
    group = str(tmp_path / "multirun" / "sweep")
    logging = spec_for(db, group).logging
    registry.create(name).open_group(logging, group)
    groups = []
    for job in ("0", "1"):
        run_dir = Path(group) / job
        tracker = registry.create(name)
        tracker.start(info_for(db, run_dir, group), None)
        tracker.log_metrics(metrics(1), 1)
        tracker.finish("FINISHED")
        held = read(name, tracker.record(), run_dir)
        assert_holds(held, range(1, 2))
        groups.append(held.group)
    registry.create(name).close_group(logging, group, "FINISHED")
    assert groups[0] and groups[0] == groups[1]

    alone = registry.create(name)
    alone.start(info_for(db, tmp_path / "alone"), None)
    alone.log_metrics(metrics(1), 1)
    alone.finish("FINISHED")
    assert read(name, alone.record(), tmp_path / "alone").group == ""


def test_mlflow_sweep_parent_run_is_closed_with_the_sweeps_status(db):
    from mlflow import MlflowClient

    from rlhf.tracking.mlflow_tracker import PARENT_TAG

    logging = spec_for(db, "s").logging
    tracker = registry.create("mlflow")
    tracker.open_group(logging, "s")
    tracker.open_group(logging, "s")  # a second sweep process (or a retry) finds the same parent
    client = MlflowClient(tracking_uri=logging.tracking_uri)
    exp = client.get_experiment_by_name(logging.experiment).experiment_id
    parents = client.search_runs([exp], filter_string=f"tags.`{PARENT_TAG}` = 's'")
    assert len(parents) == 1 and parents[0].info.status == "RUNNING"
    tracker.close_group(logging, "s", "FAILED")
    assert client.get_run(parents[0].info.run_id).info.status == "FAILED"
