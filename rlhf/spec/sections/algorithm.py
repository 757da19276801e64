"""``algorithm.*``: an algorithm is a preset of registry entries (advantage estimator, policy loss, KL, the IS
correction, filters, the preference and reward-model losses), not a code path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.spec import names
from rlhf.spec.keys import items, key


@dataclass(frozen=True)
class AdvantageSpec:
    """How advantages are estimated (rlhf.algo ADVANTAGE_ESTIMATORS)."""

    estimator: str = key(
        "gae",
        "advantage estimator; flash_reinforce (OpenRLHF 0.11.2): reward minus the whole rollout batch's mean reward, "
        "no group (one sample per prompt works), no whitening; gpg (veRL's GPG): the group-mean-centred reward times "
        "the batch size over the count of non-zero rewards in the batch, no whitening; opo (veRL's OPO): the reward "
        "minus the group's response-length-weighted mean reward; grpo_passk (veRL's pass@k GRPO): only the best "
        "sample of each group gets an advantage, (best - second best) / (group std + std_eps), the others 0; remax "
        "(veRL's ReMax): the reward minus that of one greedy (temperature 0) response to the same prompt, generated "
        "and scored each step beside the samples; optimal_token_baseline (veRL's): each token's return minus a "
        "baseline per step, its group's returns there weighted by each trajectory's path-variance proxy so far, "
        "sum_j<=t (1 - 2 pi(y_j) + sum pi^2) (times the squared IS weights with an IS correction; from the old "
        "policy's forward, always recomputed); tir_optimal_token_baseline: the same with steps counted over the "
        "generated tokens only (a multi-turn episode's tool outputs skipped); no whitening",
        choices=names.ADVANTAGE_ESTIMATORS,
    )
    gamma: float = key(1.0, "discount; group estimators and flash_reinforce need 1", ge=0, le=1)
    lambd: float = key(1.0, "GAE lambda", ge=0, le=1)
    no_std_norm: bool = key(False, "whiten advantages without dividing by their std (OpenRLHF no_std_norm)")
    whiten_variance: str = key(
        "population",
        "the variance whitening divides by (gae, reinforce, reinforce_baseline): population (sum / N over the batch's "
        "tokens; OpenRLHF) | unbiased (N / (N - 1) times it; veRL's masked_whiten)",
        choices=names.WHITEN_VARIANCES,
    )
    skip_masked_tokens: bool = key(
        False,
        "masked tokens inside a response (a multi-turn episode's tool output): false: GAE and discounted returns step "
        "through them as zero-reward, zero-value tokens, so gamma x lambda decays across them (OpenRLHF) | true: "
        "they are skipped, the next generated token's value, advantage and return carried over unchanged (veRL)",
    )
    std_eps: float = key(
        1e-9,
        "group_norm (GRPO) and grpo_passk: added to the group's std before dividing, so an all-equal group gives 0: "
        "1e-9 (OpenRLHF) | "
        "1e-6 (veRL's epsilon, which import-verl writes) | 1e-4 (TRL); apart only for near-equal scores",
        gt=0,
    )


@dataclass(frozen=True)
class PolicyLossSpec:
    """The policy loss and how token losses are aggregated (rlhf.algo POLICY_LOSSES, LOSS_AGGREGATIONS)."""

    type: str = key(
        "ppo",
        "policy loss: ppo (clipped surrogate; OpenRLHF, veRL vanilla) | gspo (sequence ratio) | cispo (MiniMax-M1, "
        "from veRL: the clipped ratio is a detached weight on A x log pi, so clipped tokens keep a gradient; no dual "
        "clip) | gpg (from veRL: -A x log pi, no ratio, no clip) | sapo (SAPO, from veRL: a soft gate "
        "sigmoid(tau (ratio - 1)) x 4 / tau instead of the clip, tau sapo_tau_pos for A > 0 else sapo_tau_neg; "
        "seq_mean) | geo_mean (GMPO, from veRL: the geometric mean of the token ratios, each log-ratio clipped to "
        "[-eps_clip_low, eps_clip_high] on the side the advantage's sign says, times the sequence's mean advantage; "
        "seq_mean) | clip_cov (Clip-Cov, from veRL: PPO's clip, and a random cov_fraction of the tokens whose "
        "centred A x log pi covariance lies in clip_cov_bounds get no gradient) | kl_cov (KL-Cov, from veRL: "
        "-A x ratio, plus kl_cov_coef x |log ratio| on the cov_fraction of tokens with the largest covariance) | "
        "dppo_tv, dppo_kl (DPPO, arXiv 2602.04879, from veRL: -A x sg[min(ratio, dppo_ratio_cap)] x log pi on the "
        "tokens inside a trust region of the token probability: p - p_old <= eps_clip_high where A > 0 and >= "
        "-eps_clip_low otherwise (tv), or the binary KL of the two probabilities <= eps_clip_high / eps_clip_low on "
        "the side that moves against A's sign (kl); the clip fraction counts the tokens outside it) | dro (DRO, from "
        "veRL: -(A x log pi - dro_beta / 2 x (log ratio)^2), no clip); none of the last seven has a dual clip",
        choices=names.POLICY_LOSSES,
    )
    eps_clip_low: float = key(
        0.2,
        "ratio clipped below at 1 - eps_clip_low (< 1; cispo: >= 1 leaves it unbounded below, as veRL's example)",
        ge=0,
    )
    eps_clip_high: float = key(0.2, "ratio clipped above at 1 + eps_clip_high (> eps_clip_low: DAPO clip-higher)", ge=0)
    dual_clip: float | None = key(
        None, "dual-clip constant c (null: off, as veRL's gspo; ppo and gspo only; veRL's vanilla loss: 3)", gt=1
    )
    aggregation: str = key(
        "token_mean",
        "how token losses become one loss: token_mean (one token mean over the optimizer step) | seq_mean (mean of "
        "each sequence's token mean: every sample weighs the same) | seq_mean_token_sum | seq_mean_token_sum_norm | "
        "token_sum (veRL's token-sum: the sum over every token of the step, no mean); OpenRLHF's --actor.loss_agg_mode "
        "names token-mean and seq-mean-token-mean are the first two",
        choices=names.LOSS_AGGREGATION_NAMES,
    )
    aggregation_norm: int | None = key(
        None, "constant normaliser of seq_mean_token_sum_norm (null: aggregation_norm_from decides)", ge=1
    )
    aggregation_norm_from: str = key(
        "max_new_tokens",
        "what seq_mean_token_sum_norm (Dr. GRPO) divides by when aggregation_norm is null: max_new_tokens "
        "(rollout.max_new_tokens, one constant for the run; ours) | micro_batch_width (the longest response of each "
        "micro-batch, which changes from one to the next: veRL 0.9.1 without loss_scale_factor, which pads each "
        "micro-batch to its longest response and divides by that width)",
        choices=names.AGGREGATION_NORM_SOURCES,
    )
    terms_aggregation: str = key(
        "token_mean",
        "how the KL-loss (kl.placement=loss) and entropy terms are aggregated: token_mean whatever aggregation says "
        "(OpenRLHF) | policy: with the policy loss's aggregation as configured (veRL, whose actor aggregates both with "
        "its loss_agg_mode)",
        choices=names.TERMS_AGGREGATIONS,
    )
    seq_ratio_aggregation: str = key(
        "seq_mean",
        "gspo: how its per-token loss is aggregated: seq_mean whatever aggregation says (OpenRLHF, the GSPO paper) | "
        "configured: by aggregation (veRL, whose gspo follows loss_agg_mode; TRL, whose sequence-level ratio "
        "follows its loss_type)",
        choices=names.SEQ_RATIO_AGGREGATIONS,
    )
    seq_ratio_is_correction: str = key(
        "rollout_ratio",
        "gspo with algorithm.is_correction on: rollout_ratio (its sequence ratio taken against the rollout engine's "
        "log-probs, no IS weights; OpenRLHF) | token_weights (the ratio against the trainer's old log-probs and each "
        "token's loss times its IS coefficient, as the token-level losses; veRL, TRL)",
        choices=names.SEQ_RATIO_IS_CORRECTIONS,
    )
    seq_ratio_gradient: str = key(
        "sequence",
        "gspo: sequence (the sequence ratio's gradient reaches every token through its mean; GSPO, OpenRLHF, TRL) | "
        "token (GSPO-token, veRL's: each token's ratio sg[s] x pi_t / sg[pi_t] has the sequence ratio's value and a "
        "gradient through its own log-prob only; its log is clamped at 10 above, as veRL's); the same when the "
        "advantage and IS weight are constant along each sequence",
        choices=names.SEQ_RATIO_GRADIENTS,
    )
    entropy_coef: float | None = key(
        None,
        "entropy bonus weight (null: no bonus and no train/entropy_loss metric; 0: that metric only). train/entropy, "
        "the entropy of the distribution sampled from (logits / rollout.temperature), is logged whatever this is",
        ge=0,
    )
    entropy_logits: str = key(
        "untempered",
        "the entropy bonus's (and train/entropy_loss's) distribution: softmax of the untempered logits (OpenRLHF) "
        "or of the logits divided by rollout.temperature, the one sampled from (tempered: veRL)",
        choices=names.ENTROPY_LOGITS,
    )
    sapo_tau_pos: float = key(1.0, "sapo: the gate's temperature for tokens with A > 0 (veRL's tau_pos)", gt=0)
    sapo_tau_neg: float = key(1.05, "sapo: the gate's temperature for tokens with A <= 0 (veRL's tau_neg)", gt=0)
    cov_fraction: float = key(
        0.0002,
        "clip_cov and kl_cov: the share of a micro-batch's tokens selected by their covariance (at least one), "
        "veRL's clip_cov_ratio / kl_cov_ratio",
        gt=0,
        le=1,
    )
    clip_cov_bounds: list[float] = key(
        factory=lambda: [1.0, 5.0],
        doc="clip_cov: [low, high] open band of the covariance a token must fall in to be eligible (veRL's "
        "clip_cov_lb, clip_cov_ub)",
        length=2,
        increasing=True,
    )
    kl_cov_coef: float = key(0.1, "kl_cov: weight of |log ratio| on the selected tokens (veRL's ppo_kl_coef)", ge=0)
    dppo_ratio_cap: float = key(
        3.0,
        "dppo_tv and dppo_kl: the detached ratio weighing each token is truncated at this (veRL's clip_ratio_c, which "
        "its DPPO losses read as this cap; 3 by default there, the paper advises a large one)",
        gt=0,
    )
    dro_beta: float | None = key(
        None, "dro: weight of the quadratic log-ratio penalty dro_beta / 2 x (log ratio)^2 (veRL's dro_beta)", gt=0
    )


@dataclass(frozen=True)
class KLSpec:
    """The KL penalty against the reference model."""

    coef: float = key(0.01, "initial KL coefficient; 0 removes the reference model", ge=0)
    estimator: str = key(
        "k1",
        "KL estimator of log r = log pi - log pi_ref: k1 (log r) | k2 (log r squared / 2) | k3 (exp(-log r) - 1 + "
        "log r) | abs (|log r|, veRL's abs); each clamped to [-10, 10] here (veRL clamps k3 only)",
        choices=names.KL_ESTIMATORS,
    )
    placement: str = key(
        "reward",
        "reward: folded into the per-token reward; loss: added to the policy loss",
        choices=names.KL_PLACEMENTS,
    )
    target: float | None = key(None, "adaptive controller (Ziegler et al.) toward this KL (null: fixed coef)", gt=0)
    controller_kl: str = key(
        "token_mean",
        "the KL the adaptive controller reads each step: token_mean (over every response token of the batch; "
        "OpenRLHF) | seq_mean (the mean of each sequence's token mean: every sample weighs the same; veRL)",
        choices=names.KL_CONTROLLER_INPUTS,
    )
    clamp_k3_only: bool = key(
        False,
        "false: every estimator's per-token value is clamped to [-10, 10] (OpenRLHF) | true: k3's alone, k1, k2 and "
        "abs unbounded (veRL)",
    )
    straight_through: bool = key(
        False,
        "placement=loss only: the loss keeps the estimator's value, its gradient is k2's (log r squared / 2), with no "
        "importance weight (veRL's '+' estimators: k1+, k3+/low_var_kl+); unbiased_gradient adds the weight pi/pi_old "
        "(OpenRLHF)",
    )
    horizon: int = key(10000, "adaptive controller horizon, in samples", ge=1)
    before_baseline: bool = key(
        False,
        "placement=reward with an estimator that subtracts a baseline (group_norm, dr_grpo, rloo, reinforce_baseline, "
        "flash_reinforce): false: the baseline (and std) is taken on the raw score and -coef x KL is added per token "
        "after it, so the advantage varies along the response (OpenRLHF); true: coef x the sequence's summed KL is "
        "subtracted from its score before the baseline and std, one advantage per sequence (veRL use_kl_in_reward)",
    )
    unbiased_gradient: bool = key(
        False,
        "placement=loss only: the loss keeps the estimator's value but its gradient is the true reverse-KL one, "
        "importance-weighted for the off-policy epochs by w = pi/pi_old (clamped at 10), the same for k1, k2 and k3 "
        "(OpenRLHF 0.11.2 --algo.kl.unbiased_gradient)",
    )


@dataclass(frozen=True)
class ISCorrectionSpec:
    """Importance-sampling correction for the mismatch between rollout-engine and trainer log-probs (OpenRLHF 0.11.2
    --algo.advantage.is_correction_*): a gate reads a statistic of w = pi_train / pi_rollout per unit (each token, or
    each sequence's mean) and masks or clips the units outside the threshold band; the loss is multiplied by the
    resulting detached weights. GSPO takes its sequence ratio against the rollout log-probs instead (no gate)."""

    type: str = key(
        "",
        "shorthand for level/mode/gating: tis (token, clip, ratio) | icepop (token, mask, ratio) | seq_mask_tis (seq, "
        "mask, ratio) | none (off); empty: the three keys below decide",
        choices=tuple(names.IS_CORRECTION_TYPES),
        empty_ok=True,
    )
    level: str = key(
        "off",
        "unit the gate reads: off (no correction) | token | seq (the sequence's mean statistic; a rejection filter)",
        choices=names.IS_CORRECTION_LEVELS,
    )
    mode: str = key(
        "mask",
        "outside the band: mask (the unit gets no gradient; the rest keep their token weight w, or their sequence "
        "weight with seq_ratio=product) | clip (w clamped into the band; level=token with gating=ratio, or the "
        "sequence weight with level=seq and seq_ratio=product)",
        choices=names.IS_CORRECTION_MODES,
    )
    gating: str = key(
        "ratio",
        "statistic gated: ratio (w itself; its geometric mean per sequence) | binary_kl | tv (the sampled token's "
        "binary KL / total variation between rollout and trainer probability: a trust region, upper bound only)",
        choices=names.IS_CORRECTION_GATINGS,
    )
    # Any: a number or a list, as OpenRLHF's flag (nargs="+"); rlhf.spec.validate checks the form.
    threshold: Any = key(
        factory=lambda: list(names.IS_CORRECTION_THRESHOLD),
        doc="[LOW, HIGH] band of the gated statistic, or HIGH alone (= [0, HIGH], the trust-region delta of "
        "binary_kl / tv)",
        ge=0,
        items=items(ge=0),
    )

    seq_ratio: str = key(
        "geometric_mean",
        "a sequence's ratio at level=seq with gating=ratio: geometric_mean (exp of its mean token log-ratio, a gate: "
        "the kept sequences keep their token weights; OpenRLHF 0.11.2 seq_mask_tis) | product (exp of its summed "
        "log-ratio, bounded to [-20, 20] first: the sequence's own IS weight, given to each of its tokens, clipped "
        "into the band with mode=clip or zeroed outside it with mode=mask; veRL 0.9.1 rollout_is=sequence)",
        choices=names.IS_SEQ_RATIOS,
    )
    batch_normalize: bool = key(
        False,
        "divide the IS weights by their mean so that they average 1 (veRL 0.9.1 rollout_is_batch_normalize): the "
        "mean over the action tokens at level=token, over the sequences with an action token (each its mean token "
        "weight) at level=seq; taken after the band, over the whole rollout batch of a training step, every "
        "micro-batch and rank (so the old log-probs are recomputed before training even on one optimizer step per "
        "rollout); a mean <= 1e-8 leaves the weights as they are",
    )

    def axes(self) -> tuple[str, str, str]:
        """``(level, mode, gating)`` in effect: the ``type`` shorthand's when it is set, else the three keys."""
        return names.IS_CORRECTION_TYPES.get(self.type, (self.level, self.mode, self.gating))

    def bounds(self) -> tuple[float, float]:
        """``(low, high)`` of the threshold (``ValueError`` on a malformed one; validation reports it first)."""
        return names.threshold_bounds(self.threshold)


@dataclass(frozen=True)
class FilterSpec:
    """Sample filters and length penalties (DAPO, ProRL)."""

    dynamic_filtering: bool = key(False, "DAPO: drop prompt groups whose mean score is not strictly inside the range")
    dynamic_filtering_range: list[float] = key(
        factory=lambda: [0.0, 1.0], doc="[low, high] of the kept groups' mean score", length=2, increasing=True
    )
    max_refill_rounds: int = key(4, "rounds of extra prompts drawn to refill dropped groups before giving up", ge=0)
    overlong_buffer_len: int | None = key(
        None, "DAPO overlong penalty: the last N tokens before max_new_tokens cost reward (null: off)", ge=1
    )
    overlong_penalty_factor: float = key(1.0, "reward lost over the whole overlong buffer", ge=0)
    stop_properly_penalty_coef: float | None = key(
        None, "ProRL: truncated samples' reward scaled by it (0..1) or set to it (< 0); null: off", le=1
    )


@dataclass(frozen=True)
class PreferenceSpec:
    """DPO-family losses (rlhf.algo PREFERENCE_LOSSES)."""

    loss: str = key("dpo", "preference loss", choices=names.PREFERENCE_LOSSES)
    beta: float = key(0.1, "inverse temperature of the implicit reward", gt=0)
    label_smoothing: float = key(0.0, "cDPO epsilon: assumed fraction of flipped labels", ge=0, lt=0.5)
    nll_coef: float = key(0.0, "NLL regulariser on chosen responses", ge=0)
    simpo_gamma: float = key(0.5, "SimPO target margin", ge=0)
    orpo_lambda: float = key(0.1, "ORPO odds-ratio weight", ge=0)
    kto_desirable_weight: float = key(1.0, "KTO weight of desirable samples", ge=0)
    kto_undesirable_weight: float = key(1.0, "KTO weight of undesirable samples", ge=0)


@dataclass(frozen=True)
class RMLossSpec:
    """Reward-model training loss (rlhf.algo RM_LOSSES)."""

    loss: str = key("sigmoid", "pairwise loss", choices=names.RM_LOSSES)
    use_margin: bool = key(False, "subtract the dataset's margin column inside the sigmoid loss")


@dataclass(frozen=True)
class RejectionSpec:
    """Rollout rejection sampling (veRL 0.9.1's algorithm.rollout_correction.rollout_rs and rollout_rs_threshold;
    rlhf.algo.rejection): the tokens or sequences whose divergence between the rollout engine's and the trainer's
    log-probs leaves its bound get no gradient (their action mask is 0) and no advantage, beside any IS correction
    (algorithm.is_correction). Needs the rollout engine's log-probs."""

    criteria: list[str] = key(
        factory=list,
        doc="every criterion must keep a token: <level>_<estimator>, level token | seq_sum | seq_mean | seq_max (the "
        "whole sequence kept or rejected), estimator k1 (log pi_rollout / pi_train, kept in [log lower, log upper]) | "
        "k2 ((log ratio)^2 / 2) | k3 (exp(log ratio) - 1 - log ratio), kept <= upper; [] : off",
        items=items(choices=names.REJECTION_CRITERIA),
    )
    upper: list[float] = key(
        factory=list,
        doc="one bound for every criterion, or one per criterion: k1's upper ratio, the others' largest divergence",
        items=items(gt=0),
    )
    lower: list[float] = key(
        factory=list,
        doc="k1 criteria only: their lower ratio, one shared or one per criterion (veRL's LOW_HIGH; the other "
        "criteria's entries are not read); [] : 1 / upper",
        items=items(gt=0),
    )

    @property
    def enabled(self) -> bool:
        return bool(self.criteria)


@dataclass(frozen=True)
class AlgorithmSpec:
    """conf/algorithm/*.yaml: an algorithm is a preset of registry entries, not a code path."""

    name: str = key("ppo", "preset name (informational)", nonempty=True)
    family: str = key("rl", "which pipeline runs", choices=names.FAMILIES)
    old_logprobs: str = key(
        "recompute",
        "RL: the old policy's log-probs: recompute (the trainer's forward over every sample before training, or its "
        "own training forward's where one optimizer step per rollout allows: OpenRLHF, veRL's default) | rollout "
        "(veRL's bypass mode: the rollout engine's log-probs stand in, one forward pass fewer per step; the policy "
        "loss is then ppo (the ratio against the engine's log-probs, no IS weights) or gpg (veRL's bypass reinforce: "
        "-A log pi times the IS weights pi / pi_rollout), and the IS correction and rejection sampling compare the "
        "current policy with the engine's in each micro-batch)",
        choices=names.OLD_LOGPROB_CHOICES,
    )
    advantage: AdvantageSpec = field(default_factory=AdvantageSpec)
    policy_loss: PolicyLossSpec = field(default_factory=PolicyLossSpec)
    kl: KLSpec = field(default_factory=KLSpec)
    is_correction: ISCorrectionSpec = field(default_factory=ISCorrectionSpec)
    rejection: RejectionSpec = field(default_factory=RejectionSpec)
    filters: FilterSpec = field(default_factory=FilterSpec)
    preference: PreferenceSpec = field(default_factory=PreferenceSpec)
    rm: RMLossSpec = field(default_factory=RMLossSpec)
