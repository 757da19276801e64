"""veRL's KL settings (``actor.use_kl_loss`` / ``kl_loss_coef`` / ``kl_loss_type``, ``algorithm.use_kl_in_reward`` /
``kl_penalty`` / ``kl_ctrl.*``) -> ``algorithm.kl.*``: where the KL goes, its coefficient or controller, its
estimator and veRL's ways with it (straight-through ``+``, k3 alone clamped)."""

from __future__ import annotations

from rlhf.importers.verl.mapper import ACTOR, UNSUPPORTED, VerlMapper
from rlhf.spec import names

# veRL's KL estimator names (core_algos.kl_penalty) -> ours.
KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3", "abs": "abs"}


def map_kl(m: VerlMapper) -> None:
    loss, in_reward = m.eff(f"{ACTOR}.use_kl_loss", bool), m.eff("algorithm.use_kl_in_reward", bool)
    kinds = (f"{ACTOR}.kl_loss_type", "algorithm.kl_penalty")
    m.handled.update(
        (
            f"{ACTOR}.use_kl_loss",
            "algorithm.use_kl_in_reward",
            f"{ACTOR}.kl_loss_coef",
            "algorithm.kl_ctrl.kl_coef",
        )
        + kinds
        + ("algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon")
    )
    if loss:
        coef, kind_key, coef_key = m.eff(f"{ACTOR}.kl_loss_coef", float), kinds[0], f"{ACTOR}.kl_loss_coef"
        m.put("algorithm.kl.placement", "loss", f"{ACTOR}.use_kl_loss")
    elif in_reward:
        coef, kind_key, coef_key = (
            m.eff("algorithm.kl_ctrl.kl_coef", float),
            kinds[1],
            "algorithm.kl_ctrl.kl_coef",
        )
        m.put("algorithm.kl.placement", "reward", "algorithm.use_kl_in_reward")
        if m.eff("algorithm.kl_ctrl.type", str) == "adaptive":
            m.put("algorithm.kl.target", m.eff("algorithm.kl_ctrl.target_kl", float), "algorithm.kl_ctrl.type")
            # veRL's apply_kl_penalty feeds the controller the mean of the sequences' token means
            m.put("algorithm.kl.controller_kl", "seq_mean", "algorithm.kl_ctrl.type")
            m.put("algorithm.kl.horizon", m.eff("algorithm.kl_ctrl.horizon", int), "algorithm.kl_ctrl.horizon")
    else:
        m.put("algorithm.kl.coef", 0.0, f"{ACTOR}.use_kl_loss", "algorithm.use_kl_in_reward")
        for k in (f"{ACTOR}.kl_loss_coef", "algorithm.kl_ctrl.kl_coef", *kinds):
            if m.given(k):
                m.explain(k, "no effect: veRL uses no KL (neither use_kl_loss nor use_kl_in_reward)")
        return
    m.put("algorithm.kl.coef", coef, coef_key, f"{ACTOR}.use_kl_loss" if loss else "algorithm.use_kl_in_reward")
    if in_reward and not loss and m.values.get("algorithm.advantage.estimator") in names.GROUP_ESTIMATORS:
        # veRL takes the sequence's summed KL off the score before the group baseline (apply_kl_penalty, then
        # the estimator sums the token rewards).
        m.put("algorithm.kl.before_baseline", True, "algorithm.use_kl_in_reward")
    other = "algorithm.use_kl_in_reward" if loss else f"{ACTOR}.use_kl_loss"
    if m.given(other) and not m.eff(other, bool):
        m.explain(other, f"off: the KL is in the {'loss' if loss else 'reward'}")
    kind = str(m.eff(kind_key, str))
    straight = kind.endswith("+")
    base = kind[:-1] if straight else kind
    if base in KL:
        m.put("algorithm.kl.estimator", KL[base], kind_key)
        if base in ("low_var_kl", "k3"):
            m.explain(kind_key, "k3; veRL clamps each token's value to [-10, 10]")
        if straight and loss and KL[base] != "k2":
            # veRL's kl_penalty: the estimator's value, k2's gradient (no importance weight)
            m.put("algorithm.kl.straight_through", True, kind_key)
        elif straight:
            m.explain(kind_key, "'+' changes only a KL loss's gradient: no effect here, nor in veRL")
        if KL[base] in ("k1", "k2", "abs"):
            # veRL clamps k3 alone
            m.put("algorithm.kl.clamp_k3_only", True, kind_key)
    else:
        m.none(kind_key, UNSUPPORTED, f"the {kind} KL estimator; one of {', '.join(sorted(set(KL)))}")
    if loss and in_reward:
        m.differ("algorithm.use_kl_in_reward", "veRL applies both; here the KL is in one place: the loss")
