"""The fan-out a pipeline logs through: metrics.jsonl always, every tracker of the list with the same names and
steps, train metrics every logging.log_every steps and eval metrics always, and on resume the steps a tracker lost
with a killed process sent again from metrics.jsonl, never a step it holds."""

from __future__ import annotations

import shutil

from readers import READERS, records

from rlhf.spec.build import load_spec
from rlhf.tracking import Tracking, read_metrics, summary_lines


def _spec(db, *overrides):
    uri = f"logging.tracking_uri=sqlite:///{db}"
    return load_spec(["+recipe=grpo_tiny_cpu", "logging.trackers=[mlflow,tensorboard]", uri, *overrides])


def _row(step: int) -> dict[str, float]:
    row = {"train/loss": 1.0 / (step + 1)}
    return {**row, "eval/pass1": step / 10} if step % 3 == 0 else row


def test_every_tracker_gets_the_same_rows_and_a_lost_tail_is_sent_again_on_resume(db, tmp_path):
    run_dir = tmp_path / "run"
    spec = _spec(db, "logging.log_every=2")
    first = Tracking(spec, run_dir)
    for step in range(0, 6):
        first.log(_row(step), step)
    first.finish("KILLED")
    sent = {0: _row(0), 2: _row(2), 3: _row(3), 4: _row(4)}  # even steps, and step 3 for its eval metric
    for name, record in records(run_dir).items():
        held = READERS[name].read(record, run_dir, "")
        assert held.steps() == sent and not held.repeated(), name

    # The TensorBoard events of the killed attempt are lost; the run resumes from a checkpoint at step 4
    shutil.rmtree(records(run_dir)["tensorboard"]["dir"])
    again = Tracking(spec, run_dir, records=records(run_dir))
    again.rewind(4)
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3, 4]
    again.log(_row(5), 5)
    again.log(_row(6), 6)
    again.finish("FINISHED")
    want = {**sent, 6: _row(6)}
    for name, record in records(run_dir).items():
        held = READERS[name].read(record, run_dir, "")
        assert held.steps() == want and not held.repeated(), name


def test_the_end_summary_prints_where_each_tracker_keeps_the_run(db, tmp_path):
    run_dir = tmp_path / "run"
    tracking = Tracking(_spec(db), run_dir)
    where = tracking.locations()
    tracking.finish("FINISHED")
    lines = summary_lines({"family": "rl", "steps": 1, "seconds": 1.0, "trackers": where})
    assert any(line.startswith("  mlflow:") and "mlflow ui --backend-store-uri sqlite:///" in line for line in lines)
    assert any(f"tensorboard --logdir {run_dir / 'tensorboard'}" in line for line in lines)
