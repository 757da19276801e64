"""Pairwise reward-model losses and direct preference losses (DPO family, KTO, SimPO, ORPO).

OpenRLHF ``PairWiseLoss``, ``LogExpLoss``, ``DPOLoss`` and the pre-removal ``KTOLoss`` (``openrlhf/models/loss.py``);
SimPO (arXiv 2405.14734) and ORPO (arXiv 2403.07691) follow their papers. Every preference loss takes a
:class:`PreferenceInputs` and keyword hyper-parameters, and returns a :class:`PreferenceLossOutput`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf.algo.aggregation import AllReduce, all_reduce_sum
from rlhf.algo.registry import Registry

RMLoss = Callable[..., Tensor]

RM_LOSSES: Registry[RMLoss] = Registry("reward model loss")


@RM_LOSSES.register("sigmoid")
def pairwise_sigmoid_loss(chosen: Tensor, rejected: Tensor, margin: Tensor | None = None) -> Tensor:
    """Bradley-Terry loss ``mean(-log σ(r_c - r_r - margin))`` (OpenRLHF ``PairWiseLoss``, ``--model.loss_type
    sigmoid``); ``margin`` is the per-pair dataset margin, or ``None``."""
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    return -F.logsigmoid(diff).mean()


@RM_LOSSES.register("logexp")
def pairwise_logexp_loss(chosen: Tensor, rejected: Tensor, margin: Tensor | None = None) -> Tensor:
    """``mean(log(1 + exp(r_r - r_c)))`` (OpenRLHF ``LogExpLoss``, arXiv 2204.05862), as a softplus so large gaps do
    not overflow. OpenRLHF silently ignores a margin here; we refuse one rather than drop it."""
    if margin is not None:
        raise ValueError("the logexp reward-model loss has no margin; use 'sigmoid' for margin losses")
    return F.softplus(rejected - chosen).mean()


@dataclass(frozen=True)
class PreferenceInputs:
    """Sequence log-probabilities of a preference batch, each ``[B]``, summed over response tokens.

    Attributes:
        policy_chosen, policy_rejected: ``Σ_t log π_θ`` of the chosen / rejected responses (for KTO: the desirable /
            undesirable samples, which need not be paired or equally many).
        reference_chosen, reference_rejected: the same under the frozen reference (DPO, cDPO, IPO, KTO).
        chosen_lengths, rejected_lengths: response token counts, for length-normalised losses (SimPO, ORPO, NLL).
        policy_kl, reference_kl: KTO's KL-estimate samples (mismatched prompt/response pairs) under both models.
    """

    policy_chosen: Tensor
    policy_rejected: Tensor
    reference_chosen: Tensor | None = None
    reference_rejected: Tensor | None = None
    chosen_lengths: Tensor | None = None
    rejected_lengths: Tensor | None = None
    policy_kl: Tensor | None = None
    reference_kl: Tensor | None = None


@dataclass(frozen=True)
class PreferenceLossOutput:
    """Scalar loss plus detached per-sample implicit rewards (for accuracy and margins); ``kl`` is KTO's estimate."""

    loss: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    kl: Tensor | None = None


PreferenceLoss = Callable[..., PreferenceLossOutput]

PREFERENCE_LOSSES: Registry[PreferenceLoss] = Registry("preference loss")


def _require(value: Tensor | None, field: str, loss: str) -> Tensor:
    if value is None:
        raise ValueError(f"{loss} needs PreferenceInputs.{field}")
    return value


def _reference_logratios(inputs: PreferenceInputs, loss: str) -> tuple[Tensor, Tensor]:
    # (log π_θ - log π_ref) of the chosen and of the rejected responses.
    chosen = inputs.policy_chosen - _require(inputs.reference_chosen, "reference_chosen", loss)
    rejected = inputs.policy_rejected - _require(inputs.reference_rejected, "reference_rejected", loss)
    return chosen, rejected


def _average_log_probs(inputs: PreferenceInputs, loss: str) -> tuple[Tensor, Tensor]:
    # Length-normalised sequence log-probs: Σ_t log π / |y|.
    chosen = inputs.policy_chosen / _require(inputs.chosen_lengths, "chosen_lengths", loss)
    rejected = inputs.policy_rejected / _require(inputs.rejected_lengths, "rejected_lengths", loss)
    return chosen, rejected


@PREFERENCE_LOSSES.register("dpo")
@PREFERENCE_LOSSES.register("cdpo")
def dpo_loss(inputs: PreferenceInputs, *, beta: float, label_smoothing: float = 0.0) -> PreferenceLossOutput:
    """DPO (arXiv 2305.18290) and, with ``label_smoothing = ε > 0``, conservative DPO (OpenRLHF ``DPOLoss``):

    ``z = (π_c - π_r) - (ref_c - ref_r)``; ``L = mean(-log σ(βz)(1 - ε) - log σ(-βz) ε)``;
    rewards ``β(π_c - ref_c)``, ``β(π_r - ref_r)``. Registered as both ``dpo`` and ``cdpo``.
    """
    chosen, rejected = _reference_logratios(inputs, "dpo")
    z = chosen - rejected
    losses = -F.logsigmoid(beta * z) * (1 - label_smoothing) - F.logsigmoid(-beta * z) * label_smoothing
    return PreferenceLossOutput(losses.mean(), beta * chosen.detach(), beta * rejected.detach())


@PREFERENCE_LOSSES.register("ipo")
def ipo_loss(inputs: PreferenceInputs, *, beta: float) -> PreferenceLossOutput:
    """IPO (arXiv 2310.12036, eq. 17; OpenRLHF ``DPOLoss(ipo=True)``): ``mean((z - 1/(2β))²)``, same ``z`` and rewards
    as DPO."""
    chosen, rejected = _reference_logratios(inputs, "ipo")
    losses = (chosen - rejected - 1 / (2 * beta)).pow(2)
    return PreferenceLossOutput(losses.mean(), beta * chosen.detach(), beta * rejected.detach())


@PREFERENCE_LOSSES.register("kto")
def kto_loss(
    inputs: PreferenceInputs,
    *,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
    all_reduce: AllReduce | None = None,
    world_size: int = 1,
) -> PreferenceLossOutput:
    """KTO (arXiv 2402.01306), OpenRLHF's pre-removal ``KTOLoss`` (uneven sampling):

    ``KL = clamp(all_reduce(mean(π_KL - ref_KL)) / world_size, min=0)`` (detached);
    ``L_c = 1 - σ(β(π_c - ref_c - KL))``, ``L_r = 1 - σ(β(KL - (π_r - ref_r)))``;
    ``loss = mean(cat(w_d · L_c, w_u · L_r))``. The KL samples are the mismatched pairs ``(x_i, y_{i+1})``.
    """
    kl_policy = _require(inputs.policy_kl, "policy_kl", "kto")
    kl_reference = _require(inputs.reference_kl, "reference_kl", "kto")
    kl = all_reduce_sum((kl_policy - kl_reference).mean().detach(), all_reduce)
    kl = (kl / world_size).clamp(min=0)
    chosen, rejected = _reference_logratios(inputs, "kto")
    chosen_losses = 1 - torch.sigmoid(beta * (chosen - kl))
    rejected_losses = 1 - torch.sigmoid(beta * (kl - rejected))
    loss = torch.cat((desirable_weight * chosen_losses, undesirable_weight * rejected_losses)).mean()
    return PreferenceLossOutput(loss, beta * chosen.detach(), beta * rejected.detach(), kl)


@PREFERENCE_LOSSES.register("simpo")
def simpo_loss(inputs: PreferenceInputs, *, beta: float, gamma: float) -> PreferenceLossOutput:
    """SimPO (arXiv 2405.14734), reference-free: ``mean(-log σ(β(π_c/|y_c| - π_r/|y_r|) - γ))``;
    rewards ``β · π/|y|``."""
    chosen, rejected = _average_log_probs(inputs, "simpo")
    losses = -F.logsigmoid(beta * (chosen - rejected) - gamma)
    return PreferenceLossOutput(losses.mean(), beta * chosen.detach(), beta * rejected.detach())


@PREFERENCE_LOSSES.register("orpo")
def orpo_loss(inputs: PreferenceInputs, *, lambd: float) -> PreferenceLossOutput:
    """ORPO (arXiv 2403.07691), reference-free: ``L = NLL + λ · mean(-log σ(log odds_c - log odds_r))``.

    ``log odds(y) = log p - log(1 - p)`` with ``log p = π/|y|`` (length-normalised); NLL is
    :func:`nll_regularizer` of the chosen responses. Rewards ``λ · log p``.
    """
    chosen, rejected = _average_log_probs(inputs, "orpo")
    log_odds = (chosen - rejected) - (torch.log1p(-chosen.exp()) - torch.log1p(-rejected.exp()))
    odds_ratio_loss = -F.logsigmoid(log_odds).mean()
    nll = -chosen.mean()  # nll_regularizer(policy_chosen, chosen_lengths), lengths already divided out
    return PreferenceLossOutput(nll + lambd * odds_ratio_loss, lambd * chosen.detach(), lambd * rejected.detach())


def nll_regularizer(policy_chosen: Tensor, chosen_lengths: Tensor) -> Tensor:
    """``-mean_i(Σ_t log π(y_c,i) / |y_c,i|)``: the chosen responses' per-token NLL, averaged per sequence (OpenRLHF's
    DPO ``nll_loss``, Llama-3.1 style); the trainer adds ``nll_coef ·`` this."""
    return -(policy_chosen / chosen_lengths).mean()


def preference_accuracy(chosen_rewards: Tensor, rejected_rewards: Tensor) -> Tensor:
    """Fraction of pairs whose chosen reward beats the rejected one: ``mean(1[r_c > r_r])``."""
    return (chosen_rewards > rejected_rewards).float().mean()
