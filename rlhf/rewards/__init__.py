"""Reward sources for RL: built-in verifiers, python reward_func files, remote HTTP endpoints, and the hook for
the reward-model role, all behind ``RewardSource.score(queries, prompts, responses, labels) -> RewardResult``; reward
functions in OpenRLHF's, veRL's or TRL's contract, read from their signature (rlhf.rewards.contracts), take the
whole :class:`RewardBatch` through :func:`score_batch`."""

from rlhf.rewards.batch import RewardBatch, score_batch
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
    "RewardBatch",
    "RewardError",
    "RewardResult",
    "RewardSource",
    "VerifierReward",
    "coerce_result",
    "load_reward_func",
    "make_reward_source",
    "score_batch",
    "verify",
]
