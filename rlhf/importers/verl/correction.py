"""veRL's rollout correction (``algorithm.rollout_correction.*``: IS weights per token or sequence, TIS or IcePop,
batch-normalised; rejection sampling; bypass mode reported) -> ``algorithm.is_correction.*`` and
``algorithm.rejection.*``."""

from __future__ import annotations

from rlhf.importers.verl.mapper import UNSUPPORTED, VerlMapper
from rlhf.spec.names import REJECTION_CRITERIA

BYPASS_PPO_NO_WEIGHTS = (
    "bypass mode with ppo_clip applies no IS weights (its ratio against the engine's log-probs is the correction; "
    "veRL computes them for its metrics only), nor here"
)


def map_correction(m: VerlMapper) -> None:
    """veRL's rollout IS weights (rollout_corr_helper.compute_rollout_correction_weights): per token (the token
    ratio) or per sequence (the product of its token ratios), truncated at a number (TIS: clip into [0, HIGH])
    or zeroed outside a "LOW_HIGH" band (IcePop: mask), optionally divided by their batch mean."""
    p = "algorithm.rollout_correction"
    k, thr_k, norm_k = f"{p}.rollout_is", f"{p}.rollout_is_threshold", f"{p}.rollout_is_batch_normalize"
    level = m.eff(k, (str, type(None)))
    m.handled.update((k, thr_k, norm_k))
    ppo_bypass = (
        m.eff(f"{p}.bypass_mode", bool) and (m.eff(f"{p}.loss_type", (str, type(None))) or "ppo_clip") == "ppo_clip"
    )
    if level in ("token", "sequence") and ppo_bypass:
        for key_ in (k, thr_k, norm_k):
            if m.given(key_):
                m.explain(key_, BYPASS_PPO_NO_WEIGHTS)
    elif level in ("token", "sequence"):
        mode, band = _is_band(m, thr_k)
        if level == "token":
            m.put("algorithm.is_correction.type", "tis" if mode == "clip" else "icepop", k)
        else:
            m.put("algorithm.is_correction.level", "seq", k)
            m.put("algorithm.is_correction.mode", mode, k, thr_k)
            m.put("algorithm.is_correction.gating", "ratio", k)
            m.put("algorithm.is_correction.seq_ratio", "product", k)
        m.put("algorithm.is_correction.threshold", list(band), thr_k)
        unit = "token weights" if level == "token" else "each sequence's weight (the product of its token ratios)"
        how = "capped at the threshold (TIS)" if mode == "clip" else "zeroed outside the band (IcePop)"
        m.explain(k, f"{unit} {how}")
        if m.eff(norm_k, bool):
            m.put("algorithm.is_correction.batch_normalize", True, norm_k)
            m.explain(norm_k, "mean 1 over the rollout batch")
        elif m.given(norm_k):
            m.explain(norm_k, "off, as here")
    else:
        if level is not None:
            m.none(k, UNSUPPORTED, f"{level!r}: veRL's levels are token and sequence")
        if m.given(norm_k) and m.eff(norm_k, bool):
            m.explain(norm_k, "no IS weights to normalise (rollout_is unset), in veRL as here")
        elif m.given(norm_k):
            m.explain(norm_k, "off, as here")
    _map_rejection(m, p)
    _map_bypass(m, p)


#: veRL's bypass-mode loss_type -> ours (rlhf.spec.names.BYPASS_LOSSES).
BYPASS_LOSS_TYPES = {"ppo_clip": "ppo", "reinforce": "gpg"}


def _map_bypass(m: VerlMapper, p: str) -> None:
    """veRL's bypass mode (rollout_corr_helper.apply_bypass_mode): the rollout log-probs stand in for the old
    policy's and its loss (``loss_type``) replaces actor.policy_loss.loss_mode."""
    k, lt_k = f"{p}.bypass_mode", f"{p}.loss_type"
    m.handled.update((k, lt_k))
    if not m.eff(k, bool):
        if m.given(k):
            m.explain(k, "off: the trainer recomputes the old log-probs, as here")
        if m.given(lt_k):
            m.explain(lt_k, "read by veRL's bypass mode only, which is off")
        return
    loss_type = m.eff(lt_k, (str, type(None))) or "ppo_clip"
    if loss_type not in BYPASS_LOSS_TYPES:
        m.none(lt_k, UNSUPPORTED, f"{loss_type!r}: veRL's bypass losses are ppo_clip and reinforce")
        return
    m.put("algorithm.old_logprobs", "rollout", k)
    m.put("algorithm.policy_loss.type", BYPASS_LOSS_TYPES[loss_type], lt_k, k)
    if loss_type == "reinforce":
        m.put("algorithm.policy_loss.dual_clip", None, lt_k)  # no clipped surrogate for clip_ratio_c to bound
    loss_mode = "actor_rollout_ref.actor.policy_loss.loss_mode"
    if m.given(loss_mode) and m.eff(loss_mode, str) != "vanilla":
        m.explain(loss_mode, "replaced by the bypass mode's loss_type in veRL, as here")
    m.explain(k, "the rollout engine's log-probs are the old policy's: one forward pass fewer per step")


def _map_rejection(m: VerlMapper, p: str) -> None:
    """veRL's rejection sampling (rollout_corr_helper.compute_rollout_rejection_mask): ``rollout_rs`` a comma
    separated list of criteria, ``rollout_rs_threshold`` one bound shared or one per criterion, ``LOW_HIGH`` for the
    k1 ones."""
    k, thr_k = f"{p}.rollout_rs", f"{p}.rollout_rs_threshold"
    m.handled.update((k, thr_k))
    raw = m.eff(k, (str, type(None)))
    if raw is None:
        if m.given(thr_k) and m.eff(thr_k) is not None:
            m.explain(thr_k, "read by rejection sampling only (rollout_rs), which is off in veRL as here")
        return
    criteria = list(dict.fromkeys(c.strip() for c in str(raw).split(",") if c.strip()))
    unknown = [c for c in criteria if c not in REJECTION_CRITERIA]
    if not criteria or unknown:
        m.none(k, UNSUPPORTED, f"{raw!r}: veRL's criteria are {', '.join(REJECTION_CRITERIA)}")
        return
    spec = m.eff(thr_k, (float, str, type(None)))
    parts = [s.strip() for s in str(spec).split(",") if s.strip()] if spec is not None else []
    if len(parts) == 1:
        parts *= len(criteria)
    try:
        if len(parts) != len(criteria):
            raise ValueError
        if any("_" in s and not c.endswith("k1") for c, s in zip(criteria, parts, strict=True)):
            raise ValueError
        bounds = [tuple(float(x) for x in s.split("_", 1)) if "_" in s else (None, float(s)) for s in parts]
    except ValueError:
        m.none(thr_k, UNSUPPORTED, f"{spec!r}: one bound shared or one per criterion, LOW_HIGH for the k1 ones")
        return
    ups = [up for _, up in bounds]
    m.put("algorithm.rejection.criteria", criteria, k)
    m.put("algorithm.rejection.upper", ups[:1] if len(set(ups)) == 1 else ups, thr_k)
    if any(low is not None for _, (low, _) in zip(criteria, bounds, strict=True)):
        # one lower per criterion, read for the k1 ones (a k1 bound given as a number: veRL's 1 / upper); the
        # others' entry is their upper bound, which nothing reads
        lows = [up if low is None and not c.endswith("k1") else (1.0 / up if low is None else low)
                for c, (low, up) in zip(criteria, bounds, strict=True)]  # fmt: skip
        m.put("algorithm.rejection.lower", lows, thr_k)
    m.explain(k, "the tokens or sequences outside the bounds get no gradient and no advantage, as in veRL")


def _is_band(m: VerlMapper, thr_k: str) -> tuple[str, tuple[float, float]]:
    """Our mode and ``(low, high)`` of veRL's rollout_is_threshold: a number HIGH (TIS: clip, low 0) or a string
    "LOW_HIGH" (IcePop: mask); veRL's default (TIS at 2) when it is neither."""
    raw = m.eff(thr_k, (float, str))
    text = str(raw).strip()
    try:
        low, high = (float(x) for x in text.split("_", 1)) if "_" in text else (0.0, float(text))
    except ValueError:
        m.none(thr_k, UNSUPPORTED, f"{raw!r}: a number HIGH (TIS) or LOW_HIGH (IcePop); veRL's 2.0 used")
        return "clip", (0.0, 2.0)
    if not 0 <= low < high:
        m.none(thr_k, UNSUPPORTED, f"{raw!r}: need 0 <= LOW < HIGH; veRL's 2.0 used")
        return "clip", (0.0, 2.0)
    return ("mask" if "_" in text else "clip"), (low, high)
