"""Adding a tracker is one module plus one registry line (README "Adding a backend"): a tracker written outside rlhf
(tests/tracking/toy_tracker.py), registered by that line alone, is accepted by validation under its config string,
created by the registry, satisfies the Protocol's signatures, and is driven by the same fan-out the run lifecycle
uses (rlhf.tracking.tracker.Tracking) through a run, a resume that repeats no step, and the end summary."""

from __future__ import annotations

import json

import pytest
import test_conformance as conformance

from rlhf.spec import registry
from rlhf.spec.build import load_spec
from rlhf.spec.validate import validate
from rlhf.tracking.tracker import Tracking

TOY = ["+recipe=grpo_tiny_cpu", "logging.trackers=[toy]", "logging.mlflow=false", "logging.progress=false"]


@pytest.fixture
def toy_registered(monkeypatch):
    """The one line a new tracker adds to rlhf/spec/registry.py, for this test only."""
    monkeypatch.setitem(registry.TRACKERS, "toy", registry.Backend("toy_tracker:ToyTracker"))


def _points(run_dir):
    rows = [json.loads(line) for line in (run_dir / "toy" / "points.jsonl").read_text().splitlines()]
    return rows, [r["step"] for r in rows if "step" in r]


def test_a_tracker_named_only_by_its_registry_line_validates_and_follows_the_protocol(toy_registered):
    spec = load_spec(TOY)
    assert spec.logging.active_trackers == ("toy",) and validate(spec) == []
    conformance.test_every_tracker_implements_the_protocol_with_its_signatures("toy")  # the registered ones' check


def test_an_unregistered_tracker_name_is_refused_with_the_registered_ones(toy_registered):
    errors = validate(load_spec(["+recipe=grpo_tiny_cpu", "logging.trackers=[toyy]", "logging.mlflow=false"]))
    assert [e.key for e in errors] == ["logging.trackers[0]"]
    assert "toy" in errors[0].fix and "mlflow" in errors[0].fix


def test_the_lifecycles_fan_out_drives_the_new_tracker_through_a_run_and_a_resume(toy_registered, tmp_path):
    spec = load_spec(TOY)
    first = Tracking(spec, tmp_path, params={"steps": "6"})
    for step in range(4):
        first.log({"train/loss": 1.0 / (step + 1)}, step)
    first.finish("KILLED")
    records = first.records()

    again = Tracking(spec, tmp_path, records=records)  # a resume from the checkpoint of step 1
    again.rewind(1)
    for step in range(2, 6):
        again.log({"train/loss": 1.0 / (step + 1)}, step)
    assert again.locations() == {"toy": f"toy: {tmp_path / 'toy' / 'points.jsonl'}"}
    again.finish("FINISHED")

    rows, steps = _points(tmp_path)
    assert steps == [0, 1, 2, 3, 4, 5]  # steps 2 and 3, redone after the resume, are not sent twice
    params = [r["params"] for r in rows if "params" in r]
    assert len(params) == 1 and params[0]["steps"] == "6" and params[0]["trainer.lr"]  # once, on the new run
    assert [r["status"] for r in rows if "status" in r] == ["KILLED", "FINISHED"]
