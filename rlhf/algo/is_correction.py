"""Importance-sampling correction of the rollout/trainer mismatch, as level x mode x gating x threshold.

OpenRLHF 0.11.2 ``PolicyLoss`` (``openrlhf/models/loss.py``; arXiv-less source: "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training", fengyao.notion.site/off-policy-rl). The rollout engine samples from π_rollout,
the trainer's old log-probs are π_train's; ``w = π_train / π_rollout`` per token (detached). A *gate* reads a
statistic per unit and keeps the units inside ``[low, high]``:

* level: the unit, ``token`` or ``seq`` (the sequence's mean statistic), or ``off``;
* gating (``IS_GATINGS``): the statistic, ``ratio`` (w itself; per sequence its geometric mean) or the sampled
  token's ``binary_kl`` / ``tv`` between the rollout and trainer probabilities of that token (per sequence their
  plain mean): a trust region, bounded from above only;
* mode (``IS_MODES``): ``mask`` (out-of-band units weigh 0, the others keep their token weight w) or ``clip``
  (the statistic, the token ratio, clamped into the band: truncated IS).

Two more axes carry veRL 0.9.1's ``algorithm.rollout_correction`` (``rollout_corr_helper.py``):

* seq_ratio (``IS_SEQ_RATIOS``, level=seq with gating=ratio): what a sequence's ratio is. ``geometric_mean``
  (OpenRLHF): ``exp(mean_t log w_t)``, a gate only, the kept sequences keeping their token weights w.
  ``product`` (veRL ``rollout_is=sequence``): ``prod_t w_t = exp(sum_t log w_t)``, the sequence's own IS weight,
  given to each of its tokens; clip truncates it into the band (veRL's sequence TIS), mask zeroes the sequences
  outside it. The summed log-ratio is bounded to ``[-LOG_WEIGHT_BOUND, LOG_WEIGHT_BOUND]`` first, as veRL does, so
  a long sequence cannot overflow the exponential.
* batch_normalize (veRL ``rollout_is_batch_normalize``): the weights divided by their mean over the batch, so they
  average 1: the mean over the action tokens (level=token) or over the sequences with an action token of each
  sequence's mean token weight (level=seq). :func:`is_weight_totals` gives the sum and count of that mean so that
  a caller can take it over a whole rollout batch (the RL pipeline does: rl_losses.rollout_is_weight_totals); by
  default it is this call's batch.

The loss is multiplied by the resulting coefficient. The old correction types are points of this grid
(``rlhf.spec.names.IS_CORRECTION_TYPES``): tis = token clip ratio, icepop = token mask ratio, seq-mask-tis = seq mask
ratio; FlashREINFORCE's trust region is seq mask binary_kl with a single threshold delta.

OpenRLHF's validity rules are written once, in ``rlhf.spec.names.is_correction_problems``: the spec checks them
before anything starts (with the keys to fix), and :class:`ISCorrection` refuses the same combinations when built
directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf.algo.logprobs import masked_mean
from rlhf.algo.registry import Registry
from rlhf.spec.names import (
    IS_CORRECTION_LEVELS,
    IS_CORRECTION_THRESHOLD,
    IS_SEQ_RATIOS,
    is_correction_problems,
)

#: OpenRLHF's default --algo.advantage.is_correction_threshold, and the levels (the config's names).
DEFAULT_THRESHOLD = IS_CORRECTION_THRESHOLD
IS_LEVELS = IS_CORRECTION_LEVELS

# Probabilities are clamped into [eps, 1 - eps] before the divergences (OpenRLHF's value): keeps binary KL's logs
# finite for tokens of probability ~0 or ~1.
PROB_EPS = 1e-6
# Bound of a sequence's summed log-ratio before its exponential (seq_ratio=product): veRL's SAFETY_BOUND, e^20.
LOG_WEIGHT_BOUND = 20.0
# A batch mean of the weights at or below this leaves them unnormalised (all weights ~0: nothing to scale; veRL's).
BATCH_MEAN_FLOOR = 1e-8


@dataclass(frozen=True)
class ISCorrection:
    """One point of the grid; ``level="off"`` is no correction.

    Attributes:
        level, mode, gating: names in ``rlhf.spec.names.IS_CORRECTION_LEVELS`` / ``_MODES`` / ``_GATINGS``.
        low, high: the band of the gated statistic (``0`` low for an upper bound only).
        seq_ratio: a sequence's ratio at level=seq, gating=ratio: ``geometric_mean`` (OpenRLHF) or ``product``
            (veRL); ``rlhf.spec.names.IS_SEQ_RATIOS``.
        batch_normalize: divide the weights by their batch mean (veRL ``rollout_is_batch_normalize``).
    """

    level: str = "off"
    mode: str = "mask"
    gating: str = "ratio"
    low: float = DEFAULT_THRESHOLD[0]
    high: float = DEFAULT_THRESHOLD[1]
    seq_ratio: str = IS_SEQ_RATIOS[0]
    batch_normalize: bool = False

    def __post_init__(self) -> None:
        if self.level not in IS_LEVELS:
            raise ValueError(f"IS correction level {self.level!r}; valid: {', '.join(IS_LEVELS)}")
        IS_MODES.get(self.mode)
        IS_GATINGS.get(self.gating)
        if self.seq_ratio not in IS_SEQ_RATIOS:
            raise ValueError(f"IS correction seq_ratio {self.seq_ratio!r}; valid: {', '.join(IS_SEQ_RATIOS)}")
        problems = is_correction_problems(self.level, self.mode, self.gating, self.low, self.seq_ratio)
        if problems:
            raise ValueError("; ".join(f"IS correction {axis}: {reason}" for axis, reason in problems))

    @property
    def enabled(self) -> bool:
        return self.level != "off"

    @property
    def sequence_product(self) -> bool:
        """One weight per sequence, the product of its token ratios (veRL's sequence-level IS)."""
        return self.level == "seq" and self.gating == "ratio" and self.seq_ratio == "product"


#: ``(old_log_probs, rollout_log_probs) -> per-token statistic`` and whether a sequence's statistic is the
#: geometric (True: mean in log space) or the plain mean of its tokens'.
@dataclass(frozen=True)
class Gating:
    token_statistic: Callable[[Tensor, Tensor], Tensor]
    geometric_mean: bool


IS_GATINGS: Registry[Gating] = Registry("IS correction gating")


def _log_ratio(old_log_probs: Tensor, rollout_log_probs: Tensor) -> Tensor:
    """``log w = log π_train - log π_rollout`` (the gate's log statistic for ``ratio``)."""
    return old_log_probs - rollout_log_probs


def _probabilities(old_log_probs: Tensor, rollout_log_probs: Tensor) -> tuple[Tensor, Tensor]:
    # (p, q): the sampled token's probability under the rollout engine and under the trainer, clamped.
    p = rollout_log_probs.exp().clamp(PROB_EPS, 1 - PROB_EPS)
    q = old_log_probs.exp().clamp(PROB_EPS, 1 - PROB_EPS)
    return p, q


def binary_kl(old_log_probs: Tensor, rollout_log_probs: Tensor) -> Tensor:
    """``p log(p/q) + (1-p) log((1-p)/(1-q))``: the KL between Bernoulli(p) and Bernoulli(q) of the sampled token
    ("this token or another"), p its rollout probability, q its trainer probability.

    Clamped at 0, where OpenRLHF 0.11.2 is not: a KL is >= 0, but when p and q agree the two terms cancel in fp32
    to a little below 0 (down to about -6e-8), under the 0 that a single threshold puts below the band, and its
    gate drops those on-policy units (measured on a CPU run whose rollout and trainer log-probs agreed to 2e-7:
    OpenRLHF's PolicyLoss dropped 13 of 16 sequences at threshold 5e-3; tests/algo/test_openrlhf_parity.py pins
    the difference)."""
    p, q = _probabilities(old_log_probs, rollout_log_probs)
    return (p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()).clamp(min=0)


def total_variation(old_log_probs: Tensor, rollout_log_probs: Tensor) -> Tensor:
    """``|p - q|``: the total variation between the sampled token's rollout and trainer probabilities."""
    p, q = _probabilities(old_log_probs, rollout_log_probs)
    return (p - q).abs()


IS_GATINGS.add("ratio", Gating(_log_ratio, geometric_mean=True))
IS_GATINGS.add("binary_kl", Gating(binary_kl, geometric_mean=False))
IS_GATINGS.add("tv", Gating(total_variation, geometric_mean=False))

#: ``(statistic, token_weight, low, high) -> (coefficient, filtered)``, both shaped like the statistic (broadcast).
Mode = Callable[[Tensor, Tensor, float, float], tuple[Tensor, Tensor]]

IS_MODES: Registry[Mode] = Registry("IS correction mode")


@IS_MODES.register("mask")
def mask_mode(stat: Tensor, token_weight: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Units outside ``[low, high]`` weigh 0; the others keep their per-token IS weight ``w``."""
    keep = (stat >= low) & (stat <= high)
    return torch.where(keep, token_weight, torch.zeros_like(token_weight)), ~keep


@IS_MODES.register("clip")
def clip_mode(stat: Tensor, token_weight: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """The statistic (the token ratio: level=token, gating=ratio only) clamped into ``[low, high]``."""
    return stat.clamp(min=low, max=high), (stat < low) | (stat > high)


@dataclass(frozen=True)
class ISWeights:
    """Attributes:
    coef: ``[B, T]`` detached factor of the per-token loss.
    filter_ratio: fraction of units outside the band: of the action tokens (level=token) or of the sequences
        (level=seq); OpenRLHF's ``is_filter_ratio``.
    """

    coef: Tensor
    filter_ratio: Tensor


def is_weight_totals(coef: Tensor, action_mask: Tensor, level: str) -> Tensor:
    """``[sum, count]`` of the units whose mean ``batch_normalize`` divides by: the action tokens' weights
    (level=token), or each sequence's mean token weight over the sequences with an action token (level=seq).
    Summed over micro-batches (and ranks), ``sum / count`` is the mean over their union."""
    mask = action_mask.to(coef.dtype)
    if level == "seq":
        tokens = mask.sum(dim=-1)
        has_tokens = (tokens > 0).to(coef.dtype)
        per_seq = (coef * mask).sum(dim=-1) / tokens.clamp(min=1)
        return torch.stack([(per_seq * has_tokens).sum(), has_tokens.sum()])
    return torch.stack([(coef * mask).sum(), mask.sum()])


def is_weights(
    old_log_probs: Tensor,
    rollout_log_probs: Tensor,
    action_mask: Tensor,
    correction: ISCorrection,
    batch_totals: Tensor | None = None,
) -> ISWeights:
    """The loss coefficients of ``correction`` (enabled) for one micro-batch of ``[B, T]`` log-probs.

    ``batch_totals``: with ``correction.batch_normalize``, the :func:`is_weight_totals` of the whole batch to
    normalise over (a rollout batch cut into micro-batches); ``None``: this micro-batch's own."""
    if not correction.enabled:
        raise ValueError("is_weights needs an enabled correction (level token or seq)")
    old, rollout = old_log_probs.detach(), rollout_log_probs.detach()
    gating = IS_GATINGS.get(correction.gating)
    seq = correction.level == "seq"
    if correction.sequence_product:
        # The sequence's IS weight is both the gated statistic and the weight its tokens get.
        log_sum = (_log_ratio(old, rollout) * action_mask).sum(dim=-1, keepdim=True)
        stat = log_sum.clamp(-LOG_WEIGHT_BOUND, LOG_WEIGHT_BOUND).exp()
        token_weight = stat.expand_as(old)
    else:
        token_weight = _log_ratio(old, rollout).exp()
        stat = gating.token_statistic(old, rollout)
        if seq:
            stat = masked_mean(stat, action_mask, dim=-1).unsqueeze(-1)
        if gating.geometric_mean:
            stat = stat.exp()
    coef, filtered = IS_MODES.get(correction.mode)(stat, token_weight, correction.low, correction.high)
    coef = coef.expand_as(token_weight)
    # Counted at the unit's own granularity, as OpenRLHF (a sequence without action tokens has a NaN mean, so it
    # counts as filtered there too; it contributes nothing to the loss either way).
    filter_ratio = filtered.float().mean() if seq else masked_mean(filtered.float(), action_mask)
    if correction.batch_normalize:
        totals = is_weight_totals(coef, action_mask, correction.level) if batch_totals is None else batch_totals
        mean = totals[0] / totals[1].clamp(min=1)
        if mean > BATCH_MEAN_FLOOR:
            coef = coef / mean
    return ISWeights(coef=coef, filter_ratio=filter_ratio)
