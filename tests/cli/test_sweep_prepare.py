"""Before a multirun starts: Hydra's public override parser expands what can be expanded, interval() sweeps are left
to a sampling sweeper, and the Optuna sweeper gets rlhf's defaults."""

from __future__ import annotations

import pytest

from rlhf.cli.common import ConfigSource, expand_sweep
from rlhf.cli.multirun import OPTUNA_MAX_FAILURE_RATE, plugin_sweeper_defaults, prepare
from rlhf.spec.build import compose


def test_lists_and_ranges_expand_to_the_cartesian_product_in_order():
    sweep = expand_sweep(["+recipe=grpo_tiny_cpu", "seed=1,2", "trainer.max_steps=range(2,5,2)"])
    assert sweep.jobs == [
        ["+recipe=grpo_tiny_cpu", "seed=1", "trainer.max_steps=2"],
        ["+recipe=grpo_tiny_cpu", "seed=1", "trainer.max_steps=4"],
        ["+recipe=grpo_tiny_cpu", "seed=2", "trainer.max_steps=2"],
        ["+recipe=grpo_tiny_cpu", "seed=2", "trainer.max_steps=4"],
    ]
    assert sweep.sampled == []


def test_a_later_override_of_a_key_replaces_the_earlier_one():
    assert expand_sweep(["seed=1,2", "seed=3"]).jobs == [["seed=3"]]


def test_intervals_are_left_to_the_sampling_sweeper():
    sweep = expand_sweep(["+recipe=quickstart_cpu", "trainer.lr=interval(1e-4,1e-2)", "seed=1,2"])
    assert sweep.jobs == [["+recipe=quickstart_cpu", "seed=1"], ["+recipe=quickstart_cpu", "seed=2"]]
    assert [o.get_key_element() for o in sweep.sampled] == ["trainer.lr"]


def test_basic_sweeper_refuses_an_interval_naming_the_plugin(capsys):
    with pytest.raises(SystemExit) as e:
        prepare(["+recipe=quickstart_cpu", "trainer.lr=interval(1e-4,1e-2)"], ConfigSource())
    assert e.value.code == 2
    assert "hydra/sweeper=optuna" in capsys.readouterr().err


def test_an_interval_end_of_the_wrong_type_is_refused_before_the_study(capsys):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    with pytest.raises(SystemExit):
        prepare(
            ["hydra/sweeper=optuna", "+recipe=grpo_tiny_cpu", "trainer.max_steps=interval(1.5,4.5)"], ConfigSource()
        )
    err = capsys.readouterr().err
    assert "trainer.max_steps=1.5" in err and "none was started" in err


def test_optuna_gets_rlhfs_failure_rate_and_the_sweep_direction():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    base = compose(["hydra/sweeper=optuna", "+recipe=quickstart_cpu"], return_hydra_config=True)
    assert plugin_sweeper_defaults(base, ["hydra/sweeper=optuna"]) == [
        f"hydra.sweeper.max_failure_rate={OPTUNA_MAX_FAILURE_RATE}",
        "hydra.sweeper.direction=maximize",
    ]
    base = compose(
        ["hydra/sweeper=optuna", "+recipe=quickstart_cpu", "sweep.direction=minimize"], return_hydra_config=True
    )
    given = ["hydra.sweeper.max_failure_rate=0.5"]
    assert plugin_sweeper_defaults(base, given) == ["hydra.sweeper.direction=minimize"]
    basic = compose(["+recipe=quickstart_cpu"], return_hydra_config=True)
    assert plugin_sweeper_defaults(basic, []) == []
