"""Pure tensor math of RLHF: advantages, KL, distillation rewards, policy/value losses, aggregation, SFT/RM/preference
losses.

Imports torch, the standard library and rlhf.spec.names (the config's vocabulary and the estimators' traits,
declared once there). The registries below are keyed by the exact strings the config uses;
``REGISTRY.get(name)`` raises an error listing the valid names for an unknown one.
"""

from rlhf.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    AdvantageOutput,
    compute_advantages_and_returns,
)
from rlhf.algo.aggregation import LOSS_AGGREGATIONS, LossNormalizer, aggregate, step_loss_normalizer
from rlhf.algo.distill import reverse_kl_estimate, reverse_kl_rewards
from rlhf.algo.is_correction import IS_GATINGS, IS_MODES, ISCorrection, ISWeights, is_weights
from rlhf.algo.kl import KL_ESTIMATORS, compute_approx_kl, compute_reward, controller_kl, kl_loss, make_kl_controller
from rlhf.algo.logprobs import entropy_from_logits, log_probs_from_logits, masked_mean, masked_sum, masked_whiten
from rlhf.algo.policy_loss import POLICY_LOSSES, PolicyLossParams, entropy_bonus, policy_loss, value_loss
from rlhf.algo.preference import (
    PREFERENCE_LOSSES,
    RM_LOSSES,
    PreferenceInputs,
    PreferenceLossOutput,
    nll_regularizer,
    preference_accuracy,
)
from rlhf.algo.registry import DuplicateNameError, Registry, UnknownNameError
from rlhf.algo.shaping import keep_group, normalize_rewards, overlong_penalty, stop_properly_penalty
from rlhf.algo.supervised import sft_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "IS_GATINGS",
    "IS_MODES",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "PREFERENCE_LOSSES",
    "RM_LOSSES",
    "AdvantageEstimator",
    "AdvantageOutput",
    "ISCorrection",
    "ISWeights",
    "DuplicateNameError",
    "LossNormalizer",
    "PreferenceInputs",
    "PreferenceLossOutput",
    "Registry",
    "UnknownNameError",
    "aggregate",
    "compute_advantages_and_returns",
    "compute_approx_kl",
    "controller_kl",
    "compute_reward",
    "entropy_bonus",
    "entropy_from_logits",
    "is_weights",
    "keep_group",
    "kl_loss",
    "log_probs_from_logits",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "nll_regularizer",
    "normalize_rewards",
    "overlong_penalty",
    "policy_loss",
    "PolicyLossParams",
    "preference_accuracy",
    "reverse_kl_estimate",
    "reverse_kl_rewards",
    "sft_loss",
    "step_loss_normalizer",
    "stop_properly_penalty",
    "value_loss",
]
