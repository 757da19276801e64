"""Validation of the off-policy corrections (``algorithm.is_correction``, ``algorithm.rejection``,
``algorithm.old_logprobs``): the IS correction's threshold and OpenRLHF 0.11.2's rules on its level, mode and gating,
rejection sampling's bounds, and bypass mode's losses; each problem as ``(key, value, fix)``, which
rlhf.spec.validate reports with the rest."""

from __future__ import annotations

from typing import Any

from rlhf.spec import names
from rlhf.spec.schema import ExperimentSpec, ISCorrectionSpec

Problem = tuple[str, Any, str]


class _Collector:
    def __init__(self) -> None:
        self.errors: list[Problem] = []

    def require(self, ok: bool, key: str, value: Any, fix: str) -> None:
        if not ok:
            self.errors.append((key, value, fix))


def problems(spec: ExperimentSpec) -> list[Problem]:
    c = _Collector()
    _check_is_correction(spec, c)
    _check_rejection(spec, c)
    _check_bypass(spec, c)
    return c.errors


def _check_is_correction(spec: ExperimentSpec, c: _Collector) -> None:
    """The threshold's form, the type shorthand against the keys it sets, and OpenRLHF 0.11.2's rules on the
    combination of level, mode and gating, with veRL's sequence product (rlhf.spec.names.is_correction_problems)."""
    isc = spec.algorithm.is_correction
    prefix = "algorithm.is_correction."
    try:
        low, high = isc.bounds()
    except ValueError as e:
        c.errors.append((prefix + "threshold", isc.threshold, str(e)))
        return
    c.require(low < high, prefix + "threshold", isc.threshold, "need LOW < HIGH in [LOW, HIGH]")
    if isc.type in names.IS_CORRECTION_TYPES:
        unset = ISCorrectionSpec()
        preset = names.IS_CORRECTION_TYPES[isc.type]
        for axis, preset_value in zip(("level", "mode", "gating"), preset, strict=True):
            value = getattr(isc, axis)
            c.require(
                value in (getattr(unset, axis), preset_value),
                prefix + axis,
                value,
                f"{prefix}type={isc.type} already sets level={preset[0]}, mode={preset[1]}, gating={preset[2]}: "
                f"remove the type (and give level, mode and gating), or remove {prefix}{axis}",
            )
    # Every type shorthand is a valid combination, so a problem here names keys the user gave.
    level, mode, gating = isc.axes()
    for axis, reason in names.is_correction_problems(level, mode, gating, low, isc.seq_ratio):
        c.errors.append((prefix + axis, getattr(isc, axis), f"(level={level}, gating={gating}) {reason}"))
    if level == "off":  # the keys that shape the weights, given while no correction weighs anything
        unset = ISCorrectionSpec()
        for key in ("batch_normalize", "seq_ratio"):
            c.require(
                getattr(isc, key) == getattr(unset, key),
                prefix + key,
                getattr(isc, key),
                f"the IS correction is off, so it would be ignored: turn it on ({prefix}type=tis, icepop or "
                f"seq-mask-tis, or {prefix}level), or remove {prefix}{key}",
            )


def _check_bypass(spec: ExperimentSpec, c: _Collector) -> None:
    """algorithm.old_logprobs=rollout (veRL's bypass mode): the losses veRL computes in it, and no IS correction
    beside PPO's ratio, which already is one."""
    a = spec.algorithm
    if a.old_logprobs != "rollout":
        return
    c.require(
        a.family == "rl",
        "algorithm.old_logprobs",
        a.old_logprobs,
        "only RL has a rollout engine whose log-probs could stand in: remove it",
    )
    c.require(
        a.policy_loss.type in names.BYPASS_LOSSES,
        "algorithm.policy_loss.type",
        a.policy_loss.type,
        "with algorithm.old_logprobs=rollout (veRL's bypass mode) the loss is ppo (veRL's ppo_clip) or gpg (veRL's "
        "reinforce, with the IS weights): choose one, or algorithm.old_logprobs=recompute",
    )
    c.require(
        not (a.policy_loss.type == "ppo" and a.is_correction.axes()[0] != "off"),
        "algorithm.is_correction.level",
        a.is_correction.axes()[0],
        "with algorithm.old_logprobs=rollout, PPO's ratio is already pi / pi_rollout, so IS weights would count it "
        "twice (veRL ignores them there): remove the IS correction, or use algorithm.policy_loss.type=gpg",
    )
    c.require(
        a.advantage.estimator not in names.TOKEN_BASELINE_ESTIMATORS,
        "algorithm.advantage.estimator",
        a.advantage.estimator,
        "the optimal token baseline reads sum pi^2 off the trainer's forward of the old policy, which "
        "algorithm.old_logprobs=rollout skips (veRL stops there too): set algorithm.old_logprobs=recompute, or "
        "choose another estimator",
    )


def _check_rejection(spec: ExperimentSpec, c: _Collector) -> None:
    """Rejection sampling's bounds: one shared or one per criterion, k1's lower below its upper; and the combinations
    where ours would not compute what veRL does."""
    rs, a = spec.algorithm.rejection, spec.algorithm
    prefix = "algorithm.rejection."
    if not rs.enabled:
        for k in ("upper", "lower"):
            c.require(
                not getattr(rs, k), prefix + k, getattr(rs, k), f"no {prefix}criteria to bound: give some or remove it"
            )
        return
    n = len(rs.criteria)
    c.require(len(rs.upper) in (1, n), prefix + "upper", rs.upper, f"give one bound, or one per criterion ({n})")
    c.require(len(rs.lower) in (0, 1, n), prefix + "lower", rs.lower, f"give none, one, or one per criterion ({n})")
    c.require(
        not rs.lower or any(x.endswith("k1") for x in rs.criteria),
        prefix + "lower",
        rs.lower,
        "only the k1 criteria take a lower bound: remove it",
    )
    if len(rs.upper) in (1, n) and len(rs.lower) in (1, n):
        ups = rs.upper * n if len(rs.upper) == 1 else rs.upper
        lows = rs.lower * n if len(rs.lower) == 1 else rs.lower
        bad = [x for x, up, low in zip(rs.criteria, ups, lows, strict=True) if x.endswith("k1") and low > up]
        c.require(
            not bad, prefix + "lower", rs.lower, f"above the upper bound of {', '.join(bad)}: need lower <= upper"
        )
    c.require(
        a.advantage.estimator not in names.CRITIC_ESTIMATORS,
        prefix + "criteria",
        rs.criteria,
        f"with {a.advantage.estimator} (a critic's GAE over the tokens) rejection sampling is not supported here: "
        "use an outcome estimator (grpo, rloo, ...) or remove it",
    )
    c.require(
        not (
            a.policy_loss.aggregation_norm is None
            and a.policy_loss.aggregation_norm_from == "micro_batch_width"
            and names.canonical_aggregation(a.policy_loss.aggregation) == "seq_mean_token_sum_norm"
        ),
        prefix + "criteria",
        rs.criteria,
        "beside Dr. GRPO's micro-batch width (algorithm.policy_loss.aggregation_norm_from=micro_batch_width) it is "
        "not supported here: veRL divides by the padded width, ours by the longest kept response; set "
        "algorithm.policy_loss.aggregation_norm or remove the rejection",
    )
