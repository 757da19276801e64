"""Reward sources for RL: built-in verifiers, python reward_func files, remote HTTP endpoints, and the hook for
the reward-model role, all behind ``RewardSource.score(queries, prompts, responses, labels) -> RewardResult``."""

from rlhf.rewards.function import FunctionReward, load_reward_func
from rlhf.rewards.remote import RemoteReward
from rlhf.rewards.result import RewardError, RewardResult, coerce_result
from rlhf.rewards.source import ModelReward, RewardSource, VerifierReward, make_reward_source
from rlhf.rewards.verifiers import VERIFIERS, verify

__all__ = [
    "VERIFIERS",
    "FunctionReward",
    "ModelReward",
    "RemoteReward",
    "RewardError",
    "RewardResult",
    "RewardSource",
    "VerifierReward",
    "coerce_result",
    "load_reward_func",
    "make_reward_source",
    "verify",
]
