"""veRL's advantage estimator and what shapes it (``algorithm.adv_estimator``, ``norm_adv_by_std_in_grpo``, ``gamma``,
``lam``, ``filter_groups.*``) -> ``algorithm.advantage.*`` and ``algorithm.filters.*``."""

from __future__ import annotations

from rlhf.importers.verl.mapper import UNSUPPORTED, VerlMapper
from rlhf.spec import names

#: veRL's epsilon on the group std (core_algos.compute_grpo_outcome_advantage's default).
VERL_GROUP_STD_EPS = 1e-6
# veRL's estimator -> ours, where the arithmetic is the same (rlhf.algo.advantages; veRL's core_algos.py).
ESTIMATORS = {
    "gae": "gae",
    "grpo": "group_norm",
    "grpo_vectorized": "group_norm",
    "rloo": "rloo",
    "rloo_vectorized": "rloo",
    "reinforce_plus_plus": "reinforce",  # discounted returns, KL in the reward, whitened over the batch
    "reinforce_plus_plus_baseline": "reinforce_baseline",  # group mean subtracted, then whitened over the batch
    "gpg": "gpg",  # group mean subtracted, scaled by batch size / non-zero scores
    "opo": "opo",  # the group's length-weighted mean subtracted
    "grpo_passk": "grpo_passk",  # only the best of each group: (best - second) / (std + epsilon)
    "remax": "remax",  # the reward of a greedy response to the prompt subtracted
    "optimal_token_baseline": "optimal_token_baseline",  # a per-token baseline weighted by path variance
    "tir_optimal_token_baseline": "tir_optimal_token_baseline",  # the same over the generated tokens only
}
# Estimators with no equivalent here: why, and the closest one the recipe uses instead.
OTHER_ESTIMATORS = {
    "gdpo": ("GDPO (grouped decoupled rewards)", "group_norm"),
}


def map_advantage(m: VerlMapper) -> None:
    k = "algorithm.adv_estimator"
    est = m.eff(k, str)
    if est in ESTIMATORS:
        ours = ESTIMATORS[est]
        if ours == "group_norm" and m.eff("algorithm.norm_adv_by_std_in_grpo", bool) is False:
            ours = "dr_grpo"
            m.explain("algorithm.norm_adv_by_std_in_grpo", "GRPO without dividing by the std: dr_grpo here")
        m.put("algorithm.advantage.estimator", ours, k)
        if ours in ("group_norm", "grpo_passk"):
            # veRL's compute_grpo(_passk)_outcome_advantage: ... / (std + epsilon), epsilon 1e-6
            m.put("algorithm.advantage.std_eps", VERL_GROUP_STD_EPS, k)
        if ours == "grpo_passk" and m.eff("algorithm.norm_adv_by_std_in_grpo", bool) is False:
            m.differ(
                "algorithm.norm_adv_by_std_in_grpo",
                "grpo_passk divides the best sample's gap by the group std here whatever it says",
            )
        if ESTIMATORS[est] in ("gae", "reinforce", "reinforce_baseline"):
            # veRL's masked_whiten divides by the unbiased (N/(N-1)) variance
            m.put("algorithm.advantage.whiten_variance", "unbiased", k)
        if ESTIMATORS[est] in ("gae", "reinforce"):
            # veRL's GAE and REINFORCE++ returns step over masked tokens inside a response (multi-turn)
            m.put("algorithm.advantage.skip_masked_tokens", True, k)
    else:
        what, closest = OTHER_ESTIMATORS.get(est, (f"{est!r}", "group_norm"))
        m.put("algorithm.advantage.estimator", closest, k)
        m.none(k, UNSUPPORTED, f"{what}; the recipe uses {closest}, the closest estimator here")
    m.handled.add("algorithm.norm_adv_by_std_in_grpo")
    m.put("algorithm.advantage.gamma", m.eff("algorithm.gamma", float), "algorithm.gamma")
    m.put("algorithm.advantage.lambd", m.eff("algorithm.lam", float), "algorithm.lam")
    if m.given("algorithm.gamma") and m.values["algorithm.advantage.estimator"] in names.GROUP_ESTIMATORS:
        m.explain("algorithm.gamma", "group estimators use 1 whatever it says, in veRL too")
    # veRL whitens REINFORCE++ advantages over the batch; GRPO divides by the group's std (no_std_norm: ours).
    filt = m.eff("algorithm.filter_groups.enable", bool)
    m.put("algorithm.filters.dynamic_filtering", bool(filt), "algorithm.filter_groups.enable")
    if filt:
        m.explain(
            "algorithm.filter_groups.enable",
            "DAPO's dynamic sampling: groups whose samples all score alike are dropped and refilled",
        )
        rounds = m.eff("algorithm.filter_groups.max_num_gen_batches", int)
        if rounds and rounds > 0:
            m.put("algorithm.filters.max_refill_rounds", rounds, "algorithm.filter_groups.max_num_gen_batches")
        else:
            m.explain("algorithm.filter_groups.max_num_gen_batches", "0 (no limit) in veRL; a limit here")
    m.handled.update(("algorithm.filter_groups.metric", "algorithm.filter_groups.max_num_gen_batches"))
    if m.given("algorithm.filter_groups.metric"):
        m.explain("algorithm.filter_groups.metric", "the groups' reward decides here (acc and score alike)")
