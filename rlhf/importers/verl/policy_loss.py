"""veRL's policy loss (``actor.policy_loss.loss_mode`` and what each mode reads, clip ratios, dual clip, loss
aggregation, entropy, sequence parallelism) -> ``algorithm.policy_loss.*`` and the critic's aggregation."""

from __future__ import annotations

from rlhf.importers.verl.mapper import ACTOR, UNSUPPORTED, VerlMapper
from rlhf.spec import names

POLICY_LOSSES = {
    "vanilla": "ppo",
    "gspo": "gspo",
    "cispo": "cispo",
    "gpg": "gpg",
    "sapo": "sapo",
    "geo_mean": "geo_mean",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    "dppo_tv": "dppo_tv",
    "dppo_kl": "dppo_kl",
    "dro": "dro",
}
OTHER_POLICY_LOSSES = {"bypass_mode": "the rollout-correction bypass mode"}
# veRL's policy losses that aggregate by seq-mean-token-mean (sapo) or a mean over sequences (geo_mean) whatever
# loss_agg_mode says: seq_mean here.
SEQUENCE_MEAN_LOSSES = ("sapo", "geo_mean")
AGGREGATIONS = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    "token-sum": "token_sum",
}


def map_policy_loss(m: VerlMapper) -> None:
    k = f"{ACTOR}.policy_loss.loss_mode"
    mode = m.eff(k, str)
    if mode in POLICY_LOSSES:
        m.put("algorithm.policy_loss.type", POLICY_LOSSES[mode], k)
        if mode == "gspo":
            # veRL's GSPO is GSPO-token: aggregated by loss_agg_mode, each token's loss times its rollout IS
            # weight, no dual clip (below).
            m.put("algorithm.policy_loss.seq_ratio_aggregation", "configured", k)
            m.put("algorithm.policy_loss.seq_ratio_is_correction", "token_weights", k)
            m.put("algorithm.policy_loss.seq_ratio_gradient", "token", k)
    else:
        m.put("algorithm.policy_loss.type", "ppo", k)
        m.none(k, UNSUPPORTED, f"{OTHER_POLICY_LOSSES.get(mode, repr(mode))}; the recipe uses the PPO clip loss")
    _loss_settings(m, mode)
    clip_k = f"{ACTOR}.clip_ratio"
    clip = m.eff(clip_k, float)
    low = m.eff(f"{ACTOR}.clip_ratio_low", float)
    high = m.eff(f"{ACTOR}.clip_ratio_high", float)
    # veRL 0.9.1 falls back to clip_ratio only for a null bound; its yaml sets both bounds to 0.2.
    m.put("algorithm.policy_loss.eps_clip_low", clip if low is None else low, f"{ACTOR}.clip_ratio_low")
    m.put("algorithm.policy_loss.eps_clip_high", clip if high is None else high, f"{ACTOR}.clip_ratio_high")
    m.handled.add(clip_k)
    if m.given(clip_k) and low is not None and high is not None:
        m.explain(clip_k, "no effect in veRL 0.9.1: clip_ratio_low and clip_ratio_high (0.2 by default) win")
    c_k = f"{ACTOR}.clip_ratio_c"
    if mode in names.DPPO_LOSSES:
        # veRL's DPPO losses read clip_ratio_c as the cap of their truncated ratio weight, and clip_ratio_low/high
        # as their trust region's bounds.
        m.put("algorithm.policy_loss.dppo_ratio_cap", m.eff(c_k, float), c_k)
    elif POLICY_LOSSES.get(mode) in names.NO_DUAL_CLIP_LOSSES or mode == "gspo":
        m.handled.add(c_k)
        if m.given(c_k):
            why = "it applies no dual clip" if mode == "gspo" else "no clipped surrogate to bound"
            m.explain(c_k, f"not read by veRL's {mode} loss ({why}), nor here")
    else:
        # veRL's vanilla loss always applies dual-clip PPO (c = clip_ratio_c, 3 by default) to negative advantages.
        m.put("algorithm.policy_loss.dual_clip", m.eff(c_k, float), c_k)
    agg_k = f"{ACTOR}.loss_agg_mode"
    agg = m.eff(agg_k, str)
    if mode in SEQUENCE_MEAN_LOSSES:
        # veRL's sapo and geo_mean losses ignore loss_agg_mode (its KL-loss and entropy terms do not).
        m.put("algorithm.policy_loss.aggregation", "seq_mean", agg_k)
        m.explain(agg_k, f"veRL's {mode} loss is a mean over sequences whatever it says, as seq_mean here")
        if agg not in ("token-mean", "seq-mean-token-mean") and (
            m.eff(f"{ACTOR}.use_kl_loss", bool) or m.eff(f"{ACTOR}.entropy_coeff", float)
        ):
            m.differ(agg_k, f"the KL-loss and entropy terms aggregate by seq_mean here, by {agg} in veRL")
    elif agg in AGGREGATIONS:
        m.put("algorithm.policy_loss.aggregation", AGGREGATIONS[agg], agg_k)
    else:
        m.none(agg_k, UNSUPPORTED, f"{agg}; one of {', '.join(AGGREGATIONS)}")
    scale = m.eff(f"{ACTOR}.loss_scale_factor", int)
    if scale is not None:
        m.put("algorithm.policy_loss.aggregation_norm", scale, f"{ACTOR}.loss_scale_factor")
    elif agg == "seq-mean-token-sum-norm":
        # veRL pads each micro-batch to its longest response and divides by that width.
        m.put("algorithm.policy_loss.aggregation_norm_from", "micro_batch_width", agg_k)
    m.handled.add(f"{ACTOR}.loss_scale_factor")
    if agg != "token-mean" and agg in AGGREGATIONS and mode not in SEQUENCE_MEAN_LOSSES:
        # veRL's actor aggregates its KL-loss and entropy terms with loss_agg_mode too.
        m.put("algorithm.policy_loss.terms_aggregation", "policy", agg_k)
    _critic_aggregation(m, agg)
    ent = m.eff(f"{ACTOR}.entropy_coeff", float)
    if ent:
        m.put("algorithm.policy_loss.entropy_coef", ent, f"{ACTOR}.entropy_coeff")
        # veRL's actor takes the entropy of the tempered logits, the distribution it sampled from
        m.put("algorithm.policy_loss.entropy_logits", "tempered", f"{ACTOR}.entropy_coeff")
    elif m.given(f"{ACTOR}.entropy_coeff"):
        m.explain(f"{ACTOR}.entropy_coeff", "0: no entropy bonus, as here")
    m.handled.add(f"{ACTOR}.entropy_coeff")


def _loss_settings(m: VerlMapper, mode: str) -> None:
    """The settings veRL's sapo, clip_cov, kl_cov and dro losses read (its defaults carried: actor.yaml's)."""
    p = f"{ACTOR}.policy_loss"
    keys = {
        "sapo": (
            ("algorithm.policy_loss.sapo_tau_pos", f"{ACTOR}.tau_pos"),
            ("algorithm.policy_loss.sapo_tau_neg", f"{ACTOR}.tau_neg"),
        ),
        "clip_cov": (("algorithm.policy_loss.cov_fraction", f"{p}.clip_cov_ratio"),),
        "kl_cov": (
            ("algorithm.policy_loss.cov_fraction", f"{p}.kl_cov_ratio"),
            ("algorithm.policy_loss.kl_cov_coef", f"{p}.ppo_kl_coef"),
        ),
        "dro": (("algorithm.policy_loss.dro_beta", f"{p}.dro_beta"),),
    }
    for ours, theirs in keys.get(mode, ()):
        m.put(ours, m.eff(theirs, float), theirs)
    if mode == "clip_cov":
        low, high = m.eff(f"{p}.clip_cov_lb", float), m.eff(f"{p}.clip_cov_ub", float)
        m.put("algorithm.policy_loss.clip_cov_bounds", [low, high], f"{p}.clip_cov_lb", f"{p}.clip_cov_ub")
    every = (
        f"{ACTOR}.tau_pos",
        f"{ACTOR}.tau_neg",
        f"{p}.clip_cov_ratio",
        f"{p}.clip_cov_lb",
        f"{p}.clip_cov_ub",
        f"{p}.kl_cov_ratio",
        f"{p}.ppo_kl_coef",
        f"{p}.dro_beta",
    )
    for k in every:
        if k not in m.handled:
            m.handled.add(k)
            if m.given(k):
                m.explain(k, f"not read by veRL's {mode} loss, nor here")


def _critic_aggregation(m: VerlMapper, actor_agg: str) -> None:
    """veRL's critic aggregates its loss by critic.loss_agg_mode, the actor's by default."""
    k = "critic.loss_agg_mode"
    m.handled.add(k)
    agg = m.eff(k, str) or actor_agg
    if m.values.get("algorithm.advantage.estimator") not in names.CRITIC_ESTIMATORS:
        if m.given(k):
            m.explain(k, "no critic with this estimator")
        return
    if agg in AGGREGATIONS:
        m.put("critic.aggregation", AGGREGATIONS[agg], k, f"{ACTOR}.loss_agg_mode")
    else:
        m.none(k, UNSUPPORTED, f"{agg}; one of {', '.join(AGGREGATIONS)}")
