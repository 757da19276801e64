"""The strings the config accepts, kept here so validation runs without importing torch.

tests/spec/test_names_match_registries.py checks that these equal the keys of rlhf.algo's registries.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec import registry

FAMILIES = ("rl", "sft", "rm", "dpo")


@dataclass(frozen=True)
class EstimatorTraits:
    """What an advantage estimator asks of the run. Declared only here: validation and the role list read it without
    torch, and rlhf.algo.advantages builds its registry on this table (adding the numerics: whitening and the
    baseline function), so a new estimator is one line here and one entry there.

    Attributes:
        needs_critic: advantages come from GAE over critic values (the critic role exists); else from returns.
        is_group: subtracts a baseline computed over the n samples of each prompt (n >= 2, sampling > 0).
        batch_baseline: the baseline is computed over the whole rollout batch at once (FlashREINFORCE, OpenRLHF
            0.11.2), so one sample per prompt is enough.
        teacher: on-policy distillation: the per-token rewards come from a frozen teacher's log-probs (the teacher
            role exists only here) and the scalar rewards are not used.
        greedy_baseline: the baseline is the reward of one greedy (temperature 0) response to the same prompt,
            generated and scored beside the samples (ReMax).
        token_baseline: the baseline differs per token and is read off the policy's distribution at each step
            (``Σπ²`` and the sampled token's probability, from the experience pass's forward: the optimal token
            baseline), so the old log-probs are always recomputed.
    """

    needs_critic: bool = False
    is_group: bool = False
    batch_baseline: bool = False
    teacher: bool = False
    greedy_baseline: bool = False
    token_baseline: bool = False

    @property
    def gamma_one(self) -> bool:
        """Gamma is 1 whatever is configured (OpenRLHF forces it, with a warning, for every estimator with a
        baseline; validation here asks to remove the override)."""
        return self.is_group or self.batch_baseline or self.greedy_baseline


ESTIMATOR_TRAITS: dict[str, EstimatorTraits] = {
    "gae": EstimatorTraits(needs_critic=True),
    "reinforce": EstimatorTraits(),
    "reinforce_baseline": EstimatorTraits(is_group=True),
    "rloo": EstimatorTraits(is_group=True),
    "group_norm": EstimatorTraits(is_group=True),
    "dr_grpo": EstimatorTraits(is_group=True),
    "flash_reinforce": EstimatorTraits(batch_baseline=True),
    "opd": EstimatorTraits(teacher=True),
    "gpg": EstimatorTraits(is_group=True),
    "opo": EstimatorTraits(is_group=True),
    "grpo_passk": EstimatorTraits(is_group=True),
    "remax": EstimatorTraits(greedy_baseline=True),
    "optimal_token_baseline": EstimatorTraits(is_group=True, token_baseline=True),
    "tir_optimal_token_baseline": EstimatorTraits(is_group=True, token_baseline=True),
}
ADVANTAGE_ESTIMATORS = tuple(ESTIMATOR_TRAITS)
# The estimators with each trait, as the messages and the converter name them.
GROUP_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.is_group)
GAMMA_ONE_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.gamma_one)
CRITIC_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.needs_critic)
TEACHER_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.teacher)
GREEDY_BASELINE_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.greedy_baseline)
TOKEN_BASELINE_ESTIMATORS = tuple(n for n, t in ESTIMATOR_TRAITS.items() if t.token_baseline)
POLICY_LOSSES = ("ppo", "gspo", "cispo", "gpg", "sapo", "geo_mean", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro")
# Policy losses with no dual clip (veRL applies clip_ratio_c in its vanilla loss only; its DPPO losses read it as
# their own ratio cap: algorithm.policy_loss.dppo_ratio_cap).
NO_DUAL_CLIP_LOSSES = ("cispo", "gpg", "sapo", "geo_mean", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro")
# DPPO's losses: eps_clip_low / eps_clip_high bound a divergence between the new and old token probabilities.
DPPO_LOSSES = ("dppo_tv", "dppo_kl")
# Policy losses that clip the ratio below at 1 - eps_clip_low, which must then stay > 0 (eps_clip_low < 1).
RATIO_FLOOR_LOSSES = ("ppo", "gspo", "clip_cov")
# Sequence-level policy losses: one value per sequence, so seq_mean aggregation (veRL's sapo and geo_mean ignore
# loss_agg_mode likewise).
SEQUENCE_LOSSES = ("gspo", "sapo", "geo_mean")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
KL_PLACEMENTS = ("reward", "loss")
#: algorithm.kl.controller_kl: what the adaptive controller reads, the token mean (OpenRLHF) or the mean of the
#: sequences' token means (veRL).
KL_CONTROLLER_INPUTS = ("token_mean", "seq_mean")
#: algorithm.advantage.whiten_variance: whitening by the population variance (OpenRLHF) or the N/(N-1) one (veRL).
WHITEN_VARIANCES = ("population", "unbiased")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")
# OpenRLHF's --actor.loss_agg_mode names (0.11.2), accepted as they are: the same aggregation under another name.
LOSS_AGGREGATION_ALIASES = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean"}
# What algorithm.policy_loss.aggregation accepts.
LOSS_AGGREGATION_NAMES = LOSS_AGGREGATIONS + tuple(LOSS_AGGREGATION_ALIASES)


#: algorithm.policy_loss.terms_aggregation: the KL-loss and entropy terms by token mean (OpenRLHF) or as the policy
#: loss (veRL).
TERMS_AGGREGATIONS = ("token_mean", "policy")
# The entropy bonus's distribution: softmax of the raw logits (OpenRLHF) or of logits / temperature (veRL).
ENTROPY_LOGITS = ("untempered", "tempered")
#: algorithm.policy_loss.seq_ratio_aggregation / _is_correction / _gradient: how the sequence-ratio loss (gspo) is
#: aggregated, IS-corrected and differentiated; the first of each is OpenRLHF's (the default).
SEQ_RATIO_AGGREGATIONS = ("seq_mean", "configured")
SEQ_RATIO_IS_CORRECTIONS = ("rollout_ratio", "token_weights")
SEQ_RATIO_GRADIENTS = ("sequence", "token")
#: algorithm.policy_loss.aggregation_norm_from: Dr. GRPO's divisor when aggregation_norm is null.
AGGREGATION_NORM_SOURCES = ("max_new_tokens", "micro_batch_width")


def canonical_aggregation(name: str) -> str:
    """Our name of a loss aggregation given by any accepted name (``seq-mean-token-mean`` -> ``seq_mean``)."""
    return LOSS_AGGREGATION_ALIASES.get(name, name)


# Importance-sampling correction of the rollout/trainer log-prob mismatch, OpenRLHF 0.11.2's axes
# (--algo.advantage.is_correction_level/_mode/_gating/_threshold): a gate reads a statistic per unit (each token,
# or each sequence's mean) and masks or clips the units outside [low, high].
IS_CORRECTION_LEVELS = ("off", "token", "seq")
# algorithm.old_logprobs: recomputed by the trainer, or the rollout engine's (veRL's bypass mode).
OLD_LOGPROB_CHOICES = ("recompute", "rollout")
# The policy losses bypass mode computes (veRL's rollout_correction.loss_type ppo_clip and reinforce).
BYPASS_LOSSES = ("ppo", "gpg")
# algorithm.rejection.criteria: veRL 0.9.1's rollout_rs options, <level>_<estimator> (rlhf.algo.rejection).
REJECTION_CRITERIA = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
IS_CORRECTION_MODES = ("mask", "clip")
IS_CORRECTION_GATINGS = ("ratio", "binary_kl", "tv")
#: algorithm.is_correction.seq_ratio: a sequence's ratio at level=seq, gating=ratio: the geometric mean of its token
#: ratios, a gate (OpenRLHF 0.11.2), or their product, the sequence's own IS weight (veRL 0.9.1 rollout_is=sequence).
IS_SEQ_RATIOS = ("geometric_mean", "product")
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


def is_correction_problems(
    level: str, mode: str, gating: str, low: float, seq_ratio: str = IS_SEQ_RATIOS[0]
) -> list[tuple[str, str]]:
    """OpenRLHF 0.11.2's validity rules for the correction's axes (``PolicyLoss.__init__``), and the sequence
    product's (veRL), as ``(axis, reason)`` pairs, ``[]`` when the combination is valid. Values outside the choices
    are the choices check's to report."""
    problems = []
    product = seq_ratio == "product"
    if product and level != "off" and (level != "seq" or gating != "ratio"):
        problems.append(
            (
                "seq_ratio",
                "product (a sequence's IS weight, veRL) needs level=seq and gating=ratio: it is the product of the "
                "sequence's token ratios",
            )
        )
    # OpenRLHF checks this one whatever the level, so a combination it refuses is refused here too; the sequence
    # product is a weight, so it can be clamped (veRL's sequence-level TIS).
    if mode == "clip" and (level == "seq" or gating != "ratio") and not (product and level == "seq"):
        problems.append(
            (
                "mode",
                "clip needs level=token and gating=ratio (or level=seq with seq_ratio=product, veRL's sequence "
                "weight): only the per-token ratio is a weight that can be clamped; a per-sequence statistic or a "
                "divergence is a rejection filter (use mode=mask)",
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
# Preference losses without a reference model (SimPO, ORPO): no reference role, no reference log-probs.
REFERENCE_FREE_PREFERENCE_LOSSES = ("simpo", "orpo")
RM_LOSSES = ("sigmoid", "logexp")
ROLLOUT_BACKENDS = registry.Names(registry.ROLLOUT_BACKENDS)  # live: a line added later is valid
# rollout.weight_sync: auto picks shared_memory beside the policy's rank 0 and broadcast elsewhere.
WEIGHT_SYNC_ROUTES = ("auto", "broadcast", "shared_memory", "object_store")
WEIGHT_SYNC_LORA = ("merged", "adapter")  # rollout.weight_sync_lora
# trainer.backend: the registry lines of rlhf.spec.registry
TRAIN_BACKENDS = registry.Names(registry.TRAIN_BACKENDS)  # live, as ROLLOUT_BACKENDS
PRECISIONS = ("bf16", "fp32", "fp16")
# model.architecture: what the tiny-model factory makes and the plan counts.
MODEL_ARCHITECTURES = ("llama", "qwen2", "qwen3")
# checkpoint.resume's words; any other value is a checkpoint path.
RESUME_MODES = ("auto", "never")
OPTIMIZERS = ("adamw", "fused_adam", "cpu_adam")
LR_SCHEDULERS = ("cosine_with_min_lr", "constant_with_warmup", "constant")
ACCELERATORS = ("cpu", "gpu")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
BAD_ROW_POLICIES = ("error", "skip")
TOO_LONG_POLICIES = ("truncate", "drop")
AGENT_EXECUTORS = ("single_turn", "multi_turn", "openai")
VERIFIERS = ("math", "format", "exact", "reasoning_gym")
