"""The strings the config accepts, kept here so validation runs without importing torch.

tests/spec/test_names_match_registries.py checks that these equal the keys of rlhf.algo's registries.
"""

from __future__ import annotations

from rlhf.spec import backends

FAMILIES = ("rl", "sft", "rm", "dpo")
ADVANTAGE_ESTIMATORS = (
    "gae",
    "reinforce",
    "reinforce_baseline",
    "rloo",
    "group_norm",
    "dr_grpo",
    "flash_reinforce",
    "opd",
)
# Estimators that compute a baseline over the samples of one prompt: gamma is forced to 1, no critic.
GROUP_ESTIMATORS = ("reinforce_baseline", "rloo", "group_norm", "dr_grpo")
# FlashREINFORCE (OpenRLHF 0.11.2): the baseline is the mean reward of the whole rollout batch, so one sample per
# prompt is enough; gamma is forced to 1 as for the group estimators.
BATCH_BASELINE_ESTIMATORS = ("flash_reinforce",)
# gamma is 1 whatever the config says (OpenRLHF forces it, with a warning; validation here asks to remove it).
GAMMA_ONE_ESTIMATORS = GROUP_ESTIMATORS + BATCH_BASELINE_ESTIMATORS
CRITIC_ESTIMATORS = ("gae",)
# On-policy distillation: advantages from a frozen teacher's per-token log-probs (the teacher role exists only here).
TEACHER_ESTIMATORS = ("opd",)
POLICY_LOSSES = ("ppo", "gspo")
KL_ESTIMATORS = ("k1", "k2", "k3")
KL_PLACEMENTS = ("reward", "loss")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
# OpenRLHF's --actor.loss_agg_mode names (0.11.2), accepted as they are: the same aggregation under another name.
LOSS_AGGREGATION_ALIASES = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean"}
# What algorithm.policy_loss.aggregation accepts.
LOSS_AGGREGATION_NAMES = LOSS_AGGREGATIONS + tuple(LOSS_AGGREGATION_ALIASES)


def canonical_aggregation(name: str) -> str:
    """Our name of a loss aggregation given by any accepted name (``seq-mean-token-mean`` -> ``seq_mean``)."""
    return LOSS_AGGREGATION_ALIASES.get(name, name)


# Importance-sampling correction of the rollout/trainer log-prob mismatch, OpenRLHF 0.11.2's axes
# (--algo.advantage.is_correction_level/_mode/_gating/_threshold): a gate reads a statistic per unit (each token,
# or each sequence's mean) and masks or clips the units outside [low, high].
IS_CORRECTION_LEVELS = ("off", "token", "seq")
IS_CORRECTION_MODES = ("mask", "clip")
IS_CORRECTION_GATINGS = ("ratio", "binary_kl", "tv")
#: ``algorithm.is_correction.type`` shorthands (the correction types of OpenRLHF before 0.11.2, and "none") ->
#: (level, mode, gating). Defined only here: the schema, validation, the pipeline and the converter read it.
IS_CORRECTION_TYPES = {
    "none": ("off", "mask", "ratio"),
    "tis": ("token", "clip", "ratio"),  # truncated IS: the token weight clamped into [low, high]
    "icepop": ("token", "mask", "ratio"),  # masked IS: tokens whose weight leaves [low, high] get no gradient
    "seq_mask_tis": ("seq", "mask", "ratio"),  # sequences whose geometric-mean weight leaves [low, high] dropped
}
#: OpenRLHF's default --algo.advantage.is_correction_threshold.
IS_CORRECTION_THRESHOLD = (0.5, 5.0)


def is_correction_problems(level: str, mode: str, gating: str, low: float) -> list[tuple[str, str]]:
    """OpenRLHF 0.11.2's validity rules for the correction's axes (``PolicyLoss.__init__``), as ``(axis, reason)``
    pairs, ``[]`` when the combination is valid. Values outside the choices are the choices check's to report."""
    problems = []
    # OpenRLHF checks this one whatever the level, so a combination it refuses is refused here too.
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        problems.append(
            (
                "mode",
                "clip needs level=token and gating=ratio: only the per-token ratio is a weight that can be clamped; "
                "a per-sequence statistic or a divergence is a rejection filter (use mode=mask)",
            )
        )
    if gating != "ratio" and level != "off" and low > 0:
        problems.append(
            (
                "threshold",
                f"gating={gating} takes an upper bound only (a single delta, e.g. threshold=0.005): a divergence is "
                "bounded from above, and a lower bound > 0 (the ratio band [0.5, 5] by default) would reject "
                "everything",
            )
        )
    return problems


def threshold_bounds(threshold: object) -> tuple[float, float]:
    """``(low, high)`` of ``algorithm.is_correction.threshold``, written as OpenRLHF's flag takes it: ``HIGH`` (or
    ``[HIGH]``) is ``[0, HIGH]``, an upper bound only; ``[LOW, HIGH]`` a band. Raises ``ValueError`` on any other
    form (validation reports it with the key)."""
    values = list(threshold) if isinstance(threshold, (list, tuple)) else [threshold]
    if not 1 <= len(values) <= 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError("must be a number HIGH (an upper bound: [0, HIGH]) or a list [LOW, HIGH]")
    low, high = (0.0, values[0]) if len(values) == 1 else values
    return float(low), float(high)


PREFERENCE_LOSSES = ("dpo", "cdpo", "ipo", "kto", "simpo", "orpo")
RM_LOSSES = ("sigmoid", "logexp")
ROLLOUT_BACKENDS = tuple(backends.ROLLOUT_BACKENDS)
# trainer.backend: the registry lines of rlhf.spec.backends
TRAIN_BACKENDS = tuple(backends.TRAIN_BACKENDS)
PRECISIONS = ("bf16", "fp32", "fp16")
OPTIMIZERS = ("adamw", "fused_adam", "cpu_adam")
LR_SCHEDULERS = ("cosine_with_min_lr", "constant_with_warmup", "constant")
ACCELERATORS = ("cpu", "gpu")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
BAD_ROW_POLICIES = ("error", "skip")
TOO_LONG_POLICIES = ("truncate", "drop")
AGENT_EXECUTORS = ("single_turn", "multi_turn", "openai")
VERIFIERS = ("math", "format", "exact", "reasoning_gym")
