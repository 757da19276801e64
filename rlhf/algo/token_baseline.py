"""The optimal token baseline (veRL 0.9.1's ``optimal_token_baseline`` and ``tir_optimal_token_baseline``).

A group baseline subtracts one number from every token's return; this one subtracts a number per step, the group's
returns at that step weighted by how much gradient each trajectory has carried up to it:

    w_j = 1 - 2 π(y_j) + Σ_v π_v²          (the squared norm of the score of step j, in expectation; Σπ² and π(y_j)
                                             from the old policy's forward at the sampling temperature)
    W_t = Σ_{j <= t} m_j w_j  (× ρ_j² with an IS correction: the rollout/trainer weights, squared)
    B_t = Σ_i G_{i,t} W_{i,t} m_{i,t} / (Σ_i W_{i,t} m_{i,t} + 1e-8)     over the n samples i of one prompt
    A_{i,t} = (G_{i,t} - B_t) m_{i,t},       G the return (reward-to-go, γ = 1)

Steps are counted from each response's first token (``optimal_token_baseline``: every position of the response,
masked or not, as veRL's response columns) or over its generated tokens only
(``tir_optimal_token_baseline``: tool outputs and other masked tokens of a multi-turn episode do not advance the
step). A prompt with one sample gets no baseline. The single longest response of a group, where longer than every
other, gets no baseline past the second longest (veRL's ``handle_zero_tail``, on by default there and here): beyond
it the baseline would be its own return.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# veRL's epsilon in the baseline's denominator.
EPS = 1e-8


@dataclass(frozen=True)
class TokenBaselineInputs:
    """What the optimal token baseline reads besides the rewards, action-aligned ``[B, T]``.

    Attributes:
        old_log_probs: the old policy's log-probs of the sampled tokens (at the sampling temperature).
        sum_pi_squared: ``Σ_v π_v²`` of the old policy's distribution at each step, same temperature.
        is_weights: the rollout/trainer IS weights of an enabled correction (``rlhf.algo.is_correction``), or None.
        response_start: ``[B]`` the column of each response's first token (steps are counted from it).
    """

    old_log_probs: Tensor
    sum_pi_squared: Tensor
    response_start: Tensor
    is_weights: Tensor | None = None


def path_variance(inputs: TokenBaselineInputs, mask: Tensor) -> Tensor:
    """``W[B, T]``: the cumulative path-variance proxy ``Σ_{j <= t} m_j w_j`` (see the module docstring)."""
    w = 1.0 - 2.0 * inputs.old_log_probs.exp() + inputs.sum_pi_squared
    if inputs.is_weights is not None:
        w = w * inputs.is_weights.square()
    return (w * mask).cumsum(dim=-1)


def _aligned(x: Tensor, index: Tensor, valid: Tensor) -> Tensor:
    """``x[i, index[i, k]]`` where ``valid``, else 0."""
    return x.gather(1, index.clamp(max=x.shape[1] - 1)) * valid


def optimal_token_baseline_advantages(
    returns: Tensor,
    mask: Tensor,
    inputs: TokenBaselineInputs,
    n_samples_per_prompt: int,
    *,
    generated_steps_only: bool = False,
    zero_tail: bool = True,
) -> Tensor:
    """``[B, T]`` advantages ``(G - B) · m`` of the module docstring, the n samples of each prompt contiguous.

    Args:
        returns: ``[B, T]`` the reward-to-go of each token (γ = 1).
        mask: ``[B, T]`` the tokens that count (after rejection sampling).
        inputs: see :class:`TokenBaselineInputs`.
        n_samples_per_prompt: n.
        generated_steps_only: count steps over the tokens of ``mask`` only (tir_optimal_token_baseline).
        zero_tail: no baseline on the single longest response past the second longest.
    """
    b, t = returns.shape
    if b % n_samples_per_prompt:
        raise ValueError(f"{b} samples do not split into groups of {n_samples_per_prompt}")
    mask = mask.to(returns.dtype)
    w_cum = path_variance(inputs, mask).to(returns.dtype)
    steps = torch.arange(t, device=returns.device).unsqueeze(0)
    counts = mask.sum(dim=-1).long()  # each response's counted tokens (veRL's response lengths)
    if generated_steps_only:
        # Each row's counted tokens moved to the front, in order: step k is the row's k-th token of the mask.
        order = torch.sort(torch.where(mask > 0, steps, steps + t), dim=-1, stable=True).indices
        valid = (steps < counts.unsqueeze(1)).to(returns.dtype)
    else:
        order = steps + inputs.response_start.long().unsqueeze(1)
        valid = (order < t).to(returns.dtype)
    g = _aligned(returns, order, valid)
    w = _aligned(w_cum, order, valid)
    m = _aligned(mask, order, valid)
    n = n_samples_per_prompt
    gg, ww, mm = (x.reshape(-1, n, t) for x in (g, w, m))
    baseline = (gg * ww * mm).sum(dim=1, keepdim=True) / ((ww * mm).sum(dim=1, keepdim=True) + EPS)
    baseline = baseline.expand(-1, n, -1).clone()
    lens = counts.reshape(-1, n)
    # A group's trajectories: all n (veRL's response columns), or those with a counted token (its tir variant).
    members = (lens > 0).sum(dim=1) if generated_steps_only else torch.full_like(lens[:, 0], n)
    baseline[members <= 1] = 0.0
    if zero_tail and n > 1:
        top2 = lens.topk(2, dim=1).values
        longest = lens.argmax(dim=1)
        alone = (lens == top2[:, :1]).sum(dim=1) == 1
        for group in torch.nonzero(alone & (top2[:, 0] > top2[:, 1]) & (members > 1)).flatten().tolist():
            baseline[group, longest[group], int(top2[group, 1]) :] = 0.0
    aligned_adv = (g - baseline.reshape(b, t)) * valid
    out = torch.zeros_like(returns)
    out.scatter_add_(1, order.clamp(max=t - 1), aligned_adv)
    return out * mask
