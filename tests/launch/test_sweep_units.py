"""Pure parts of sweeps: whether a job's bundles can ever fit a cluster's nodes, and the objective a job returns."""

from __future__ import annotations

import pytest

from rlhf.launch.reservation import bundles_of, fits_on
from rlhf.launch.sweep import ObjectiveMissing, objective_of
from rlhf.spec.build import load_spec

TWO_NODES = [{"CPU": 2.0}, {"CPU": 2.0}]


@pytest.mark.parametrize(
    ("bundles", "nodes", "fits"),
    [
        ([{"CPU": 2.0}], TWO_NODES, True),
        ([{"CPU": 2.0}, {"CPU": 2.0}], TWO_NODES, True),
        ([{"CPU": 3.0}], TWO_NODES, False),  # each bundle on one node: 4 CPUs in all are not enough
        ([{"CPU": 2.0}] * 3, TWO_NODES, False),
        ([{"CPU": 1.0}] * 4, TWO_NODES, True),
        ([{"GPU": 1.0, "CPU": 1.0}], TWO_NODES, False),
        # first-fit by size: 2+1 on one node and 2+1 on the other; a naive order would strand the 2s
        ([{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 2.0}, {"CPU": 2.0}], [{"CPU": 3.0}, {"CPU": 3.0}], True),
        ([{"CPU": 2.0}, {"CPU": 2.0}, {"CPU": 2.0}], [{"CPU": 3.0}, {"CPU": 3.0}], False),
    ],
)
def test_fits_on_places_every_bundle_on_one_node(bundles, nodes, fits):
    assert fits_on(bundles, nodes) is fits


def test_a_plans_bundles_are_every_device_group_together():
    spec = load_spec(["+recipe=grpo_tiny_cpu", "hardware.devices_per_node=2", "rollout.num_engines=2"])
    from rlhf.planning.plan import plan

    assert bundles_of(plan(spec)) == [{"CPU": 1.0}, {"CPU": 1.0}]


SUMMARY = {
    "final_metrics": {"eval_add_pass1": 0.25, "eval_next_pass1": 0.5, "eval_add_pass4": 0.75},
    "best": {"key": "eval_add_pass1", "value": 0.375},
}


def test_default_objective_is_the_best_checkpoint_metrics_best_value():
    spec = load_spec(["+recipe=grpo_tiny_cpu"])
    assert objective_of(SUMMARY, spec) == ("eval_add_pass1", 0.375)
    no_best = {"final_metrics": SUMMARY["final_metrics"]}
    assert objective_of(no_best, spec) == ("eval_add_pass1", 0.25)
    assert objective_of({"final_metrics": {}}, spec) == (None, None)


def test_a_named_objective_is_its_final_value_with_or_without_the_prefix():
    assert objective_of(SUMMARY, load_spec(["+recipe=grpo_tiny_cpu", "sweep.objective=eval_next_pass1"])) == (
        "eval_next_pass1",
        0.5,
    )
    assert objective_of(SUMMARY, load_spec(["+recipe=grpo_tiny_cpu", "sweep.objective=add_pass4"]))[1] == 0.75
    sft = {"final_metrics": {"eval/loss": 1.5}}
    assert objective_of(sft, load_spec(["+recipe=sft_tiny_cpu", "sweep.objective=loss"])) == ("eval/loss", 1.5)


def test_a_named_objective_that_is_missing_lists_the_metrics():
    with pytest.raises(ObjectiveMissing) as e:
        objective_of(SUMMARY, load_spec(["+recipe=grpo_tiny_cpu", "sweep.objective=eval_sum_pass1"]))
    assert "sweep.objective=eval_sum_pass1" in str(e.value) and "eval_next_pass1" in str(e.value)
