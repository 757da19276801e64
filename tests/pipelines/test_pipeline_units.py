"""Fast checks of the pipeline plumbing: atomic checkpoints (a crash mid-save leaves the previous one), resume
resolution, rotation, batching into ranks, bad rows stopping a job before any process starts, and a row only the data
build can judge stopping the cluster that started beside it."""

from __future__ import annotations

import json

import pytest
import torch

from rlhf.pipelines.batching import EvalShards, per_rank_micro_batches, redistribute
from rlhf.run_files.checkpoint import LATEST, CheckpointError, CheckpointManager


def _save(m: CheckpointManager, step: int) -> None:
    tmp = m.begin(step)
    (tmp / "weights").write_text(str(step))
    m.commit(tmp, step, {"step": step})


def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path):
    m = CheckpointManager(tmp_path, max_keep=2)
    assert m.latest() is None and m.resolve_resume("auto") is None
    _save(m, 10)
    tmp = m.begin(20)  # ... and the job dies while writing step 20
    (tmp / "weights").write_text("partial")
    assert m.latest().name == "step00000010" and m.driver_state(m.latest())["step"] == 10
    _save(m, 20)  # the next save clears the stale temporary
    assert not list(tmp_path.glob(".tmp-*")) and (tmp_path / LATEST).read_text() == "step00000020"
    _save(m, 30)
    assert [p.name for _, p in m.complete()] == ["step00000020", "step00000030"]  # rotation


def test_latest_pointer_is_followed_or_recovered(tmp_path):
    m = CheckpointManager(tmp_path)
    _save(m, 1)
    _save(m, 2)
    (tmp_path / LATEST).write_text("step00000099")  # stale pointer: fall back to the newest complete one
    assert m.latest().name == "step00000002"
    assert m.resolve_resume("never") is None
    assert m.resolve_resume(str(tmp_path)).name == "step00000002"  # a checkpoint root
    assert m.resolve_resume(str(tmp_path / "step00000001")).name == "step00000001"  # one checkpoint
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        m.resolve_resume(str(tmp_path / "nowhere"))


def test_rows_split_into_ranks_and_micro_batches():
    rows = [{"x": i} for i in range(8)]
    out = per_rank_micro_batches(rows, 2, 2, lambda rs: [r["x"] for r in rs])
    assert out == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    with pytest.raises(ValueError):
        per_rank_micro_batches(rows[:6], 2, 2, lambda rs: rs)


def test_eval_shards_pad_evenly_and_drop_the_padding():
    shards = EvalShards.build(5, 2, 2)
    assert [len(r) for r in shards.per_rank] == [2, 2]  # every rank runs the same number of forwards
    results = [[{"v": torch.tensor(idx, dtype=torch.float)} for idx in rank] for rank in shards.per_rank]
    assert shards.gather(results)["v"].tolist() == [0, 1, 2, 3, 4]


def test_redistribute_to_a_role_with_another_size():
    per_rank = [["a", "b"], ["c", "d"]]
    split, back = redistribute(per_rank, 3)
    assert [len(s) for s in split] == [2, 2, 2]
    assert back([[x.upper() for x in s] for s in split]) == [["A", "B"], ["C", "D"]]


def test_bad_row_stops_the_job_before_any_process_starts(tmp_path):
    from rlhf.data import DataError
    from rlhf.pipelines import run
    from rlhf.spec.build import load_spec

    data = tmp_path / "train.jsonl"
    rows = [{"input": "q", "output": "a"}] * 3 + [{"input": "q"}] + [{"input": "q", "output": "a"}] * 40
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = load_spec(
        ["+recipe=sft_tiny_cpu", f"data.train_files=[{data}]", "data.eval_files=[]", "logging.mlflow=false"]
    )

    def no_ray(*_):
        raise AssertionError("Ray must not start for a bad dataset")

    with pytest.raises(DataError) as err:
        run(spec, None, tmp_path / "run", realize=no_ray)
    msg = str(err.value)
    assert "train.jsonl" in msg and "row 3" in msg and "'output'" in msg


def test_ray_starts_beside_the_data_build_and_a_row_it_refuses_stops_the_cluster(tmp_path):
    """A row every column of which is present passes the row check, so Ray starts while the data is tokenised; the
    data build then refuses its value (a number where text belongs) and the run shuts down what Ray started."""
    from rlhf.data import DataError
    from rlhf.pipelines import run
    from rlhf.spec.build import load_spec

    data = tmp_path / "train.jsonl"
    rows = [{"input": "q", "output": "a"}] * 3 + [{"input": 7, "output": "a"}] + [{"input": "q", "output": "a"}] * 40
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = load_spec(
        ["+recipe=sft_tiny_cpu", f"data.train_files=[{data}]", "data.eval_files=[]", "logging.mlflow=false"]
    )
    events = []

    class Started:
        def shutdown(self):
            events.append("shutdown")

    def realize(*_):
        events.append("realize")
        return Started()

    with pytest.raises(DataError) as err:
        run(spec, None, tmp_path / "run", realize=realize)
    assert "row 3" in str(err.value) and "'input'" in str(err.value) and "expected a string" in str(err.value)
    assert events == ["realize", "shutdown"]
