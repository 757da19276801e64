"""Log-probabilities, entropy and masked reductions (OpenRLHF ``openrlhf/models/utils.py``).

All action-aligned tensors are ``[B, T-1]``; ``mask`` is 1 on tokens that count and 0 on prompt, padding and
environment-feedback tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of ``softmax(z / temperature)`` over the last axis, in fp32: ``H = logsumexp(z') - Σ_v softmax(z')_v ·
    z'_v``, ``z' = z / temperature``.

    OpenRLHF ``compute_entropy`` at temperature 1 (it computes it before the temperature division); veRL's actor
    computes it on the tempered logits, the distribution the rollout sampled from.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")

    def entropy(z: Tensor) -> Tensor:
        z = z if temperature == 1 else z / temperature
        return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)

    return _reduce_vocab(logits, entropy)


def sum_pi_squared_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``Σ_v π_v²`` of ``π = softmax(z / temperature)`` over the last axis, in fp32: ``exp(logsumexp(2z') -
    2 logsumexp(z'))`` (veRL ``calculate_sum_pi_squared_from_logits``, on the tempered logits as its actor computes
    it): what the optimal token baseline's path-variance proxy ``1 - 2π(y) + Σπ²`` needs of the whole distribution."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")

    def sum_sq(z: Tensor) -> Tensor:
        z = z if temperature == 1 else z / temperature
        return torch.exp(torch.logsumexp(2.0 * z, dim=-1) - 2.0 * torch.logsumexp(z, dim=-1))

    return _reduce_vocab(logits, sum_sq)


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


@dataclass(frozen=True)
class TokenScores:
    """What a forward scores at each position: the log-prob of its target and, where asked, the entropies and
    ``Σπ²`` of its distribution.

    Attributes:
        log_probs: ``[...]`` log-probs of the targets under ``softmax(z / temperature)``.
        entropies: one ``[...]`` tensor per requested entropy temperature, in the order asked.
        sum_pi_squared: ``[...]`` ``Σ_v π_v²`` at the sampling temperature (no gradient), or None.
    """

    log_probs: Tensor
    entropies: tuple[Tensor, ...] = ()
    sum_pi_squared: Tensor | None = None


def _chunk_scores(
    z: Tensor, labels: Tensor, temperature: float, entropy_temperatures: tuple[float, ...], sum_sq: bool
) -> tuple[Tensor, list[Tensor], Tensor | None]:
    """One chunk's log-probs of ``labels``, entropies (one per temperature) and ``Σπ²`` from its logits ``z``
    ``[C, V]``: the formulas of :func:`log_probs_from_logits`, :func:`entropy_from_logits` and
    :func:`sum_pi_squared_from_logits`, on the same fp32 values."""
    zf = _at_least_fp32(z)
    tempered = zf if temperature == 1 else zf / temperature
    lse = torch.logsumexp(tempered, dim=-1)
    logp = zf.gather(-1, labels.unsqueeze(-1)).squeeze(-1) / temperature - lse
    sq = torch.exp(torch.logsumexp(2.0 * tempered, dim=-1) - 2.0 * lse) if sum_sq else None
    del tempered
    ents = []
    for tau in entropy_temperatures:
        zt = zf if tau == 1 else zf / tau
        ents.append(torch.logsumexp(zt, dim=-1) - (torch.softmax(zt, dim=-1) * zt).sum(dim=-1))
        del zt
    return logp, ents, sq


class _HeadScores(torch.autograd.Function):
    """``(log p(labels), Σπ², *entropies)`` of ``softmax(hidden @ weight.T + bias)`` computed ``chunk`` tokens at a
    time; the backward computes each chunk's logits again (one more head matmul) instead of keeping them. ``Σπ²``
    has no gradient; an entropy nobody differentiates costs nothing in the backward."""

    @staticmethod
    def forward(
        ctx, hidden, weight, bias, labels, temperature, entropy_temperatures, entropy_grads, sum_sq, chunk  # noqa: ANN001
    ):
        n = hidden.shape[0]
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        logp = torch.empty(n, dtype=dtype, device=hidden.device)
        sq = torch.empty(n if sum_sq else 0, dtype=dtype, device=hidden.device)
        ents = [torch.empty(n, dtype=dtype, device=hidden.device) for _ in entropy_temperatures]
        for s in range(0, n, chunk):
            z = torch.nn.functional.linear(hidden[s : s + chunk], weight, bias)  # the head's own dtype, as lm_head
            lp, hs, q = _chunk_scores(z, labels[s : s + chunk], temperature, entropy_temperatures, sum_sq)
            logp[s : s + chunk] = lp
            if q is not None:
                sq[s : s + chunk] = q
            for out, h in zip(ents, hs, strict=True):
                out[s : s + chunk] = h
        ctx.save_for_backward(hidden, weight, bias, labels)
        ctx.temperature, ctx.entropy_temperatures, ctx.chunk = temperature, entropy_temperatures, chunk
        # Σπ² and the entropies only logged have no gradient: their backward gets None (set_materialize_grads) and
        # computes nothing for them, whatever the caller stacks them with.
        ctx.mark_non_differentiable(sq, *[e for e, g in zip(ents, entropy_grads, strict=True) if not g])
        ctx.set_materialize_grads(False)
        return logp, sq, *ents

    @staticmethod
    def backward(ctx, grad_logp, grad_sq, *grad_ents):  # noqa: ANN001
        hidden, weight, bias, labels = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        # Only the entropies that reach the loss: the others' gradients are None (set_materialize_grads(False)).
        wanted = [(t, g) for t, g in zip(ctx.entropy_temperatures, grad_ents, strict=True) if g is not None]
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
            gz = None
            if grad_logp is not None:
                g = grad_logp[s : s + chunk].to(zf.dtype)
                # d log p_y / dz = (onehot(y) - softmax(z / tau)) / tau
                gz = torch.softmax(zf if tau == 1 else zf / tau, dim=-1)
                gz.mul_(-(g / tau).unsqueeze(-1))
                gz[rows[: h.shape[0]], labels[s : s + chunk]] += g / tau
            for t, grad_ent in wanted:
                # H of softmax(z / t): dH / dz = -p (log p + H) / t. At most four [C, V] fp32 tensors live at once
                # (zf, gz, log_p, p): the rest works in place.
                log_p = torch.log_softmax(zf if t == 1 else zf / t, dim=-1)
                p = log_p.exp()
                big_h = -(p * log_p).sum(dim=-1, keepdim=True)
                ge = grad_ent[s : s + chunk].to(zf.dtype).unsqueeze(-1)
                term = log_p.add_(big_h).mul_(p).mul_(-ge / t)
                del p
                gz = term if gz is None else gz.add_(term)
                del log_p, term
            if gz is None:
                gz = torch.zeros_like(zf)
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
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


def token_scores_from_hidden(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    labels: Tensor,
    *,
    temperature: float = 1.0,
    entropy_temperatures: tuple[float, ...] = (),
    entropy_grads: tuple[bool, ...] | None = None,
    sum_pi_squared: bool = False,
    chunk: int = LOGIT_CHUNK_TOKENS,
) -> TokenScores:
    """Log-probabilities of ``labels`` under ``softmax((hidden @ weight.T + bias) / temperature)``, the entropy of
    ``softmax(logits / t)`` for each ``t`` of ``entropy_temperatures`` (1: untempered, OpenRLHF's; the sampling
    temperature: veRL's) and, with ``sum_pi_squared``, ``Σπ²`` at ``temperature``, from the hidden states before the
    output head, without ever holding the logits of more than ``chunk`` tokens: forward and backward go chunk by
    chunk, the backward recomputing each chunk's logits. The same numbers as :func:`log_probs_from_logits`,
    :func:`entropy_from_logits` and :func:`sum_pi_squared_from_logits` of the head's logits (fp32 math on the head's
    output), and the same gradients for ``hidden``, ``weight`` and ``bias``.

    Args:
        hidden: ``[..., H]`` the head's input.
        weight, bias: the head's ``[V, H]`` weight and ``[V]`` bias (None: no bias).
        labels: ``[...]`` token ids.
        entropy_grads: per entropy, whether a loss differentiates it (None: all); the others are logged only, have
            no gradient and cost nothing in the backward.
    Returns:
        :class:`TokenScores` of shape ``[...]`` each (fp32 or wider).
    """
    if temperature <= 0 or any(t <= 0 for t in entropy_temperatures):
        raise ValueError(f"temperatures must be > 0, got {temperature} and {entropy_temperatures}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    lead = hidden.shape[:-1]
    if labels.shape != lead:
        raise ValueError(f"labels {tuple(labels.shape)} for hidden states {tuple(hidden.shape)}")
    flat = hidden.reshape(-1, hidden.shape[-1])
    temps = tuple(float(t) for t in entropy_temperatures)
    grads = tuple(bool(g) for g in entropy_grads) if entropy_grads is not None else (True,) * len(temps)
    if len(grads) != len(temps):
        raise ValueError(f"entropy_grads {entropy_grads} for entropy temperatures {entropy_temperatures}")
    logp, sq, *ents = _HeadScores.apply(
        flat, weight, bias, labels.reshape(-1), float(temperature), temps, grads, bool(sum_pi_squared), int(chunk)
    )
    return TokenScores(logp.view(lead), tuple(e.view(lead) for e in ents), sq.view(lead) if sum_pi_squared else None)
