"""W&B's run file read back: records spanning 32 KiB blocks are joined, a file torn by a killed process yields
the records before the tear, and every attempt of a run is found, in order, the ones W&B numbered (started within
the same second as an earlier attempt of the id) included."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from rlhf.spec.schema import ExperimentSpec, LoggingSpec  # noqa: E402
from rlhf.tracking.tracker import run_info  # noqa: E402
from rlhf.tracking.wandb_files import BLOCK, attempt_order, raw_records, read_run_file, run_files  # noqa: E402
from rlhf.tracking.wandb_tracker import WandbTracker  # noqa: E402


def _offline_run(tmp_path: Path) -> Path:
    import wandb

    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True, save_code=False)
    run = wandb.init(mode="offline", project="p", dir=str(tmp_path), group="g", settings=settings)
    run.config.update({f"k{i}": "v" * 200 for i in range(400)})  # ~90 KB of config: records across blocks
    for step in range(1, 200):
        run.log({"train/loss": 1.0 / step, "eval/x": step * 0.5}, step=step)
    run.finish(exit_code=0)
    wandb.teardown()
    (path,) = run_files(tmp_path / "wandb", run.id)
    return path.path


def test_records_across_blocks_and_a_torn_tail(tmp_path):
    path = _offline_run(tmp_path)
    assert path.stat().st_size > 2 * BLOCK
    held = read_run_file(path)
    assert held.group == "g" and held.project == "p" and held.exit_code == 0
    assert held.config["k399"] == "v" * 200
    assert [row["_step"] for row in held.history] == list(range(1, 200))
    assert [row["train/loss"] for row in held.history] == [1.0 / s for s in range(1, 200)]

    whole = list(raw_records(path))
    torn = tmp_path / "torn.wandb"
    torn.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])  # cut inside some record
    kept = list(raw_records(torn))
    assert 0 < len(kept) < len(whole) and kept == whole[: len(kept)]


def test_attempts_sort_by_time_then_by_the_number_w_and_b_added():
    names = ["offline-run-20261202_044409-ab12-10", "run-20261202_044409-ab12-2", "offline-run-20261202_044410-ab12",
             "offline-run-20261202_044409-ab12", "offline-run-20261202_044408-ab12-1"]
    assert sorted(names, key=lambda n: attempt_order(n, "ab12")) == [names[4], names[3], names[1], names[0], names[2]]
    assert attempt_order("offline-run-20261202_044409-ab12-x", "ab12") is None  # run "ab12-x"'s folder
    assert attempt_order("offline-run-20261202_044409-zab12", "ab12") is None
    assert attempt_order("latest-run", "ab12") is None


def _log(tracker: WandbTracker, steps: range) -> None:
    for step in steps:
        tracker.log_metrics({"train/loss": 1.0 / step}, step)


def test_an_attempt_started_in_the_same_second_as_an_earlier_one_is_read_back_and_repeats_no_step(tmp_path):
    run_dir = tmp_path / "run"
    info = run_info(dataclasses.replace(ExperimentSpec(), logging=LoggingSpec(progress=False)), run_dir)
    first = WandbTracker()
    first.start(info, None)
    first.log_params({"trainer.lr": "0.001"})
    _log(first, range(1, 4))
    record = first.record()
    first.finish("KILLED")

    # W&B numbers an attempt's folder (<time>-<id>-1, -2, ...) when one of the id already has its second (what
    # end_stale and the resume right after it meet): make that so for every second of the next two minutes.
    now = time.time()
    for second in range(-1, 120):
        stamp = datetime.fromtimestamp(now + second).strftime("%Y%m%d_%H%M%S")
        (run_dir / "wandb" / f"offline-run-{stamp}-{record['id']}").mkdir(exist_ok=True)
    second = WandbTracker()
    assert second.start(info, record) is True
    assert Path(second.run.settings.sync_dir).name.endswith(f"{record['id']}-1")  # W&B did number it
    assert second.last_step() == 3
    _log(second, range(4, 6))
    second.finish("KILLED")

    third = WandbTracker()
    assert third.start(info, record) is True
    assert third.last_step() == 5  # the numbered attempt's steps count: 4 and 5 are not logged again
    third.finish("FINISHED")
    attempts = run_files(run_dir / "wandb", record["id"])
    assert [row["_step"] for a in attempts for row in a.history] == [1, 2, 3, 4, 5]
    assert [a.exit_code for a in attempts] == [130, 130, 0]  # oldest first: the last one's status is the run's
    assert {a.name for a in attempts} == {info.name}  # each attempt keeps the run's name


def test_a_resumed_run_whose_files_hold_no_config_asks_for_its_params_again(tmp_path):
    run_dir = tmp_path / "run"
    info = run_info(dataclasses.replace(ExperimentSpec(), logging=LoggingSpec(progress=False)), run_dir)
    first = WandbTracker()
    first.start(info, None)  # ended with no params logged: files without config, as a kill in W&B's first 15 s leaves
    record = first.record()
    first.finish("KILLED")
    again = WandbTracker()
    assert again.start(info, record) is False  # the lifecycle logs the params, as for a new run
    again.log_params({"trainer.lr": "0.001"})
    assert again.record()["id"] == record["id"]
    again.finish("FINISHED")
    (_, last) = run_files(run_dir / "wandb", record["id"])
    assert last.config["trainer.lr"] == "0.001" and last.name == info.name
