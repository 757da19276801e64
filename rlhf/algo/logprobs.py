"""Log-probabilities, entropy and masked reductions (OpenRLHF ``openrlhf/models/utils.py``).

All action-aligned tensors are ``[B, T-1]``; ``mask`` is 1 on tokens that count and 0 on prompt, padding and
environment-feedback tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# Positions per fp32 chunk (OpenRLHF's logsumexp chunk size): bounds the temporaries to chunk x vocab floats.
CHUNK_ROWS = 1024


def _at_least_fp32(logits: Tensor) -> Tensor:
    # bf16/fp16 -> fp32; fp32/fp64 are returned unchanged.
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _reduce_vocab(logits: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``fn`` (a reduction over the vocabulary axis) applied to fp32 chunks of at most ``CHUNK_ROWS`` positions.

    Chunks are views of the caller's tensor, cast and transformed out of place, so neither a full-size fp32 copy is
    made nor the caller's tensor touched. ``[B, T, V]`` logits sliced as ``logits[:, :-1]`` stay views too.
    """
    z = logits.reshape(-1, *logits.shape[-2:]) if logits.dim() >= 2 else logits.view(1, 1, -1)
    out = torch.empty(z.shape[:-1], dtype=torch.promote_types(logits.dtype, torch.float32), device=logits.device)
    for row in range(z.size(0)):
        for start in range(0, z.size(1), CHUNK_ROWS):
            out[row, start : start + CHUNK_ROWS] = fn(_at_least_fp32(z[row, start : start + CHUNK_ROWS]))
    return out.view(logits.shape[:-1])


def log_probs_from_logits(logits: Tensor, labels: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each label under ``softmax(logits / temperature)``, computed in fp32.

    ``log p(y_t) = z_{t, y_t} / τ - logsumexp(z_t / τ)`` (OpenRLHF ``log_probs_from_logits``, its fp32 path: gathered
    logit minus a logsumexp chunked over 1024 rows).

    OpenRLHF divides the logits by the temperature *in place*, which silently changes the caller's tensor (and any
    entropy computed from it afterwards). Here the caller's tensor is never modified: each chunk is cast and divided
    out of place.

    Args:
        logits: ``[..., V]`` raw (untempered) logits, any float dtype.
        labels: ``[...]`` token ids, the shape of ``logits`` without its last axis.
        temperature: the rollout sampling temperature, so training log-probs match the sampler's.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    label_logits = _at_least_fp32(logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)) / temperature
    return label_logits - _reduce_vocab(logits, lambda z: torch.logsumexp(z / temperature, dim=-1))


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of ``softmax(z)`` over the last axis, in fp32: ``H = logsumexp(z) - Σ_v softmax(z)_v · z_v``.

    OpenRLHF ``compute_entropy``. Call it on the *untempered* logits: OpenRLHF computes it before the temperature
    division, and our presets must log the same number.
    """
    return _reduce_vocab(logits, lambda z: torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1))


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``Σ values · mask`` over ``dim`` (all axes when ``None``)."""
    return (values * mask).sum(dim=dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``Σ values · mask / Σ mask`` over ``dim`` (OpenRLHF ``masked_mean``; NaN for an all-zero mask, as there)."""
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim)


def masked_whiten(
    values: Tensor, mask: Tensor, *, divide_by_std: bool = True, eps: float = 1e-8, unbiased: bool = False
) -> Tensor:
    """Whiten over all masked entries: ``(x - μ) · rsqrt(clamp(σ², eps))``, or ``x - μ`` without std.

    ``μ = Σ x·m / Σ m``, ``σ² = Σ (x-μ)²·m / Σ m`` (population variance), statistics in fp32, as OpenRLHF's
    advantage normalisation in ``compute_advantages_and_returns``. Masked entries of the result are set to 0 (OpenRLHF
    leaves ``-μ/σ`` there; every loss masks them out, so numbers that matter are the same). ``unbiased``: σ² times
    ``N / (N - 1)`` (veRL's ``masked_whiten``; it adds its 1e-8 to σ² where this clamps σ² at it).
    """
    x = values.float()
    n = mask.sum()
    mean = masked_sum(x, mask) / n
    centered = x - mean
    if divide_by_std:
        var = masked_sum(centered.pow(2), mask) / n
        if unbiased:
            var = var * n / (n - 1).clamp(min=1)
        centered = centered * var.clamp(min=eps).rsqrt()
    return centered * mask
