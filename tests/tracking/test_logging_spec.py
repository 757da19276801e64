"""logging.trackers as a user writes it: a list, the logging.mlflow shorthand, the conf/logging options, and the
errors validation gives before anything starts."""

from __future__ import annotations

import pytest

from rlhf.spec import registry as spec_registry
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.tracking import registry


def _errors(spec) -> list[str]:
    return [str(e) for e in validate(spec) if e.key.startswith("logging")]


@pytest.mark.parametrize(
    ("overrides", "active"),
    [
        ([], ("mlflow",)),
        (["logging.trackers=[mlflow,tensorboard,wandb]"], ("mlflow", "tensorboard", "wandb")),
        (["logging.mlflow=false"], ()),
        (["logging.trackers=[mlflow,wandb]", "logging.mlflow=false"], ("wandb",)),
        (["logging=console", "logging.mlflow=true"], ("mlflow", "console")),
        (["logging=wandb"], ("wandb",)),
        (["logging=tensorboard"], ("tensorboard",)),
        (["logging.trackers=[]"], ()),
    ],
)
def test_the_trackers_a_run_logs_to(overrides, active):
    assert load_spec(["+recipe=grpo_tiny_cpu", *overrides]).logging.active_trackers == active


def test_an_unknown_or_repeated_tracker_is_named_with_its_index():
    spec = load_spec(["+recipe=grpo_tiny_cpu", "logging.trackers=[mlflow,tensorbord,mlflow]"])
    assert _errors(spec) == [
        "logging.trackers[1]='tensorbord': must be one of mlflow, tensorboard, wandb, console",
        "logging.trackers[2]='mlflow': already listed earlier in logging.trackers",
    ]


def test_a_tracker_whose_package_is_missing_names_its_extra(monkeypatch):
    monkeypatch.setitem(spec_registry.TRACKERS, "wandb", spec_registry.Backend("x:Y", "no_such_package_here", "wandb"))
    spec = load_spec(["+recipe=grpo_tiny_cpu", "logging.trackers=[mlflow,wandb]"])
    (error,) = _errors(spec)
    assert "the wandb tracker needs the no_such_package_here package: pip install 'rlhf[wandb]'" in error
    with pytest.raises(registry.TrackerUnavailable, match=r"rlhf\[wandb\]"):
        registry.create("wandb")
    assert _errors(load_spec(["+recipe=grpo_tiny_cpu", "logging.trackers=[mlflow]"])) == []  # not asked for


def test_a_trackers_own_keys_are_checked():
    spec = load_spec(["+recipe=grpo_tiny_cpu", "logging.wandb.mode=onlin"])
    assert _errors(spec) == ["logging.wandb.mode='onlin': must be one of offline, online"]
