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

#: Tokens whose logits exist at once in :func:`token_scores_from_hidden` (the training forwards' log-probs and
#: entropy, rlhf.models.forward): its forward and its backward hold about six ``chunk x vocab`` fp32 temporaries
#: (1024 x 152k vocabulary: ~3.7 GB) instead of the whole micro-batch's logits, their fp32 copies and softmax
#: (16k tokens x 152k: ~10 GB each). A constant, not a key: smaller only trades speed for memory that the rest of
#: a long forward dwarfs (veRL's entropy_from_logits_with_chunking uses 2048, OpenRLHF's logsumexp 1024).
LOGIT_CHUNK_TOKENS = 1024


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


def _chunk_scores(z: Tensor, labels: Tensor, temperature: float, entropy: bool) -> tuple[Tensor, Tensor | None]:
    """One chunk's log-probs of ``labels`` and entropy from its logits ``z`` ``[C, V]``: the formulas of
    :func:`log_probs_from_logits` and :func:`entropy_from_logits`, on the same fp32 values."""
    zf = _at_least_fp32(z)
    tempered = zf if temperature == 1 else zf / temperature
    logp = zf.gather(-1, labels.unsqueeze(-1)).squeeze(-1) / temperature - torch.logsumexp(tempered, dim=-1)
    del tempered
    ent = torch.logsumexp(zf, dim=-1) - (torch.softmax(zf, dim=-1) * zf).sum(dim=-1) if entropy else None
    return logp, ent


class _HeadScores(torch.autograd.Function):
    """``(log p(labels), entropy)`` of ``softmax(hidden @ weight.T + bias)`` computed ``chunk`` tokens at a time; the
    backward computes each chunk's logits again (one more head matmul) instead of keeping them."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, entropy, chunk):  # noqa: ANN001 - autograd's signature
        n = hidden.shape[0]
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        logp = torch.empty(n, dtype=dtype, device=hidden.device)
        ent = torch.empty(n if entropy else 0, dtype=dtype, device=hidden.device)
        for s in range(0, n, chunk):
            z = torch.nn.functional.linear(hidden[s : s + chunk], weight, bias)  # the head's own dtype, as lm_head
            lp, h = _chunk_scores(z, labels[s : s + chunk], temperature, entropy)
            logp[s : s + chunk] = lp
            if entropy:
                ent[s : s + chunk] = h
        ctx.save_for_backward(hidden, weight, bias, labels)
        ctx.temperature, ctx.entropy, ctx.chunk = temperature, entropy, chunk
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, grad_ent):  # noqa: ANN001
        hidden, weight, bias, labels = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if want_h else None
        # The head's gradient is summed over chunks in fp32 and rounded once, as one matmul over all tokens would.
        acc = torch.promote_types(weight.dtype, torch.float32)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_w else None
        grad_b = torch.zeros(bias.shape, dtype=acc, device=bias.device) if want_b and bias is not None else None
        rows = torch.arange(min(chunk, hidden.shape[0]), device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            z = torch.nn.functional.linear(h, weight, bias)
            zf = _at_least_fp32(z)
            g = grad_logp[s : s + chunk].to(zf.dtype)
            # At most four [C, V] fp32 tensors live at once (zf, log_p, p and a product): the rest works in place.
            p = grad_ent_z = None
            if ctx.entropy:
                # dH / dz = -p * (log p + H), H = -sum p log p
                log_p = torch.log_softmax(zf, dim=-1)
                p = log_p.exp()
                big_h = -(p * log_p).sum(dim=-1, keepdim=True)
                ge = grad_ent[s : s + chunk].to(zf.dtype).unsqueeze(-1)
                grad_ent_z = log_p.add_(big_h).mul_(p).mul_(-ge)
                del log_p
            # d log p_y / dz = (onehot(y) - softmax(z / tau)) / tau: softmax(z) is p when tau is 1
            gz = p if p is not None and tau == 1 else torch.softmax(zf if tau == 1 else zf / tau, dim=-1)
            del p
            gz.mul_(-(g / tau).unsqueeze(-1))
            gz[rows[: h.shape[0]], labels[s : s + chunk]] += g / tau
            if grad_ent_z is not None:
                gz += grad_ent_z
                del grad_ent_z
            gz = gz.to(z.dtype)  # what the cast to fp32 hands back to the head's output
            if want_h:
                grad_h[s : s + chunk] = gz @ weight
            if want_w:
                grad_w += gz.to(acc).T @ h.to(acc)
            if grad_b is not None:
                grad_b += gz.to(acc).sum(dim=0)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None


def token_scores_from_hidden(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    labels: Tensor,
    *,
    temperature: float = 1.0,
    entropy: bool = False,
    chunk: int = LOGIT_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of ``labels`` under ``softmax((hidden @ weight.T + bias) / temperature)`` and (with
    ``entropy``) the entropy of the untempered distribution, from the hidden states before the output head, without
    ever holding the logits of more than ``chunk`` tokens: forward and backward go chunk by chunk, the backward
    recomputing each chunk's logits. The same numbers as :func:`log_probs_from_logits` and
    :func:`entropy_from_logits` of the head's logits (fp32 math on the head's output), and the same gradients for
    ``hidden``, ``weight`` and ``bias``.

    Args:
        hidden: ``[..., H]`` the head's input.
        weight, bias: the head's ``[V, H]`` weight and ``[V]`` bias (None: no bias).
        labels: ``[...]`` token ids.
    Returns:
        ``[...]`` log-probs (fp32 or wider) and the ``[...]`` entropy (None without ``entropy``).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    lead = hidden.shape[:-1]
    if labels.shape != lead:
        raise ValueError(f"labels {tuple(labels.shape)} for hidden states {tuple(hidden.shape)}")
    flat = hidden.reshape(-1, hidden.shape[-1])
    logp, ent = _HeadScores.apply(flat, weight, bias, labels.reshape(-1), float(temperature), entropy, int(chunk))
    return logp.view(lead), (ent.view(lead) if entropy else None)
