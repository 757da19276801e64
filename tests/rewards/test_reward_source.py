"""make_reward_source picks the one source the spec names; the reward model plugs in through a scorer."""

from __future__ import annotations

import pytest

from rlhf.rewards import (
    FunctionReward,
    ModelReward,
    RemoteReward,
    RewardError,
    RewardSource,
    VerifierReward,
    make_reward_source,
)
from rlhf.spec.schema import ExperimentSpec, RewardSpec


def test_each_setting_picks_its_source(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("def reward_func(queries, prompts, labels):\n    return [1.0] * len(queries)\n")
    assert isinstance(make_reward_source(RewardSpec(function=str(path))), FunctionReward)
    remote = make_reward_source(RewardSpec(urls=["http://h:1/r"], timeout_s=3, retries=2, request_batch=8))
    assert isinstance(remote, RemoteReward) and (remote.timeout_s, remote.retries, remote.request_batch) == (3, 2, 8)
    verifier = make_reward_source(ExperimentSpec(reward=RewardSpec(verifier="exact")))
    assert isinstance(verifier, VerifierReward) and isinstance(verifier, RewardSource)
    assert verifier.score(["q"], ["p"], ["7"], ["7"]).rewards == [1.0]


def test_exactly_one_source_is_required():
    with pytest.raises(RewardError, match="got none"):
        make_reward_source(RewardSpec())
    with pytest.raises(RewardError, match="reward.function, reward.verifier"):
        make_reward_source(RewardSpec(function="f.py", verifier="math"))


def test_reward_model_needs_the_workers_scorer_and_is_checked_like_any_source():
    with pytest.raises(RewardError, match="model_scorer"):
        make_reward_source(RewardSpec(model_path="/models/rm"))
    src = make_reward_source(RewardSpec(model_path="/models/rm"), model_scorer=lambda q, p, r, lab: [0.5] * len(q))
    assert isinstance(src, ModelReward) and src.score(["a", "b"], ["", ""], ["", ""], ["", ""]).rewards == [0.5, 0.5]
    bad = ModelReward(lambda q, p, r, lab: [0.5], "reward model /models/rm")
    with pytest.raises(RewardError, match="reward model /models/rm: the return value has 1 values for 2 samples"):
        bad.score(["a", "b"], ["", ""], ["", ""], ["", ""])
