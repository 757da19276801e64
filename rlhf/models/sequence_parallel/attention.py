"""The Ulysses attention functions, registered with transformers' ``AttentionInterface`` under our own names:

* ``ulysses_sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` over the sample chunks of
  rlhf.models.sequence_parallel.layout (CPU, and GPUs without flash-attn);
* ``ulysses_flash_attention_2``: ``flash_attn.flash_attn_varlen_func`` with the whole rows' cumulative sample
  lengths (GPUs with flash-attn; imported on first use). Called directly: transformers' own flash wrapper would look
  our name up as a hub kernel.

Each takes what transformers hands any attention function (``q [B, H, S/P, D]``, ``k, v [B, K, S/P, D]`` after
RoPE, from this rank's columns) and returns ``[B, S/P, H, D]``: all-to-all to ``H/P`` heads over the whole rows,
exact attention within each sample of the rows, all-to-all back. GQA/MQA: with fewer kv heads than ranks each kv
head is repeated so that every rank gets the one its query heads use (needs ``H % P == 0`` and ``K % P == 0`` or
``P % K == 0``, :func:`head_errors`). Causal attention only, without sliding window, softcap or attention sinks:
those models are refused, naming the setting.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface

from rlhf.models.sequence_parallel.comm import Exchange, all_to_all, heads_to_seq, seq_to_heads
from rlhf.models.sequence_parallel.context import current
from rlhf.models.sequence_parallel.layout import SampleLayout

ULYSSES_SDPA = "ulysses_sdpa"
ULYSSES_FLASH = "ulysses_flash_attention_2"
# The Ulysses name for each of the model's own attention implementations.
ULYSSES_FOR = {"flash_attention_2": ULYSSES_FLASH, "flash_attention_3": ULYSSES_FLASH}
UNSUPPORTED_KWARGS = ("sliding_window", "softcap", "s_aux")


def head_errors(num_heads: int, num_kv_heads: int, sp: int) -> list[str]:
    """What keeps a model with these head counts from splitting over ``sp`` ranks (empty: it can)."""
    errors = []
    if num_heads % sp:
        errors.append(f"num_heads={num_heads} is not divisible by the sequence-parallel size {sp}")
    if num_kv_heads % sp and sp % num_kv_heads:
        errors.append(f"num_kv_heads={num_kv_heads} and the sequence-parallel size {sp}: neither divides the other")
    return errors


def sdpa_kernel(q: Tensor, k: Tensor, v: Tensor, layout: SampleLayout, dropout: float, scaling: float | None) -> Tensor:
    """Causal attention within each sample, chunk by chunk: ``q [B, h, S, D]``, ``k, v [B, k, S, D]`` with ``h % k
    == 0`` -> ``[B, h, S, D]``."""
    if k.shape[1] != q.shape[1]:  # sdpa's own enable_gqa takes the slow math path on CPU
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    rows: list[list[Tensor]] = [[] for _ in range(layout.rows)]
    for c in layout.chunks:
        cols = slice(c.start, c.end)
        qc, kc, vc = (t[c.row : c.row + 1, :, cols] for t in (q, k, v))
        rows[c.row].append(
            F.scaled_dot_product_attention(
                qc, kc, vc, attn_mask=c.mask, dropout_p=dropout, is_causal=c.mask is None, scale=scaling
            )
        )
    return torch.cat([torch.cat(parts, dim=2) for parts in rows], dim=0)


def flash_kernel(
    q: Tensor, k: Tensor, v: Tensor, layout: SampleLayout, dropout: float, scaling: float | None
) -> Tensor:
    """The same with ``flash_attn_varlen_func`` over the rows laid end to end (it takes GQA as it is)."""
    from flash_attn import flash_attn_varlen_func  # only on GPUs that have it

    b, h, s, d = q.shape
    flat = [t.transpose(1, 2).reshape(b * s, t.shape[1], d) for t in (q, k, v)]
    cu, longest = layout.cu_seqlens, layout.max_seqlen
    out = flash_attn_varlen_func(*flat, cu, cu, longest, longest, dropout_p=dropout, softmax_scale=scaling, causal=True)
    return out.reshape(b, s, h, d).transpose(1, 2)


def ulysses(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    size: int,
    exchange: Exchange,
    layout: SampleLayout,
    kernel,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> Tensor:
    """One rank's attention: ``q [B, H, S/P, D]``, ``k, v [B, K, S/P, D]`` (its columns) -> ``[B, H, S/P, D]``."""
    heads, kv_heads = q.shape[1], k.shape[1]
    errors = head_errors(heads, kv_heads, size)
    if errors:
        raise ValueError("; ".join(errors))
    if q.shape[0] != layout.rows or q.shape[2] * size != layout.width:
        raise ValueError(
            f"this rank's columns {tuple(q.shape[::2])} (rows, columns) times {size} ranks do not make the rows of the "
            f"sequence-parallel context ({layout.rows}, {layout.width}): pass the shard's input_ids and position_ids"
        )
    if kv_heads < size:  # every rank needs the kv head of its query heads: repeat each P/K times
        k, v = k.repeat_interleave(size // kv_heads, dim=1), v.repeat_interleave(size // kv_heads, dim=1)
    q, k, v = (seq_to_heads(t, size, exchange) for t in (q, k, v))
    return heads_to_seq(kernel(q, k, v, layout, dropout, scaling), size, exchange)


def _attention_function(kernel):
    def attention(
        module: Any,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        dropout: float = 0.0,
        scaling: float | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, None]:
        ctx = current()
        _refuse_unsupported(module, attention_mask, kwargs)
        out = ulysses(
            query,
            key,
            value,
            size=ctx.size,
            exchange=all_to_all(ctx.group),
            layout=ctx.layout,
            kernel=kernel,
            dropout=dropout,
            scaling=scaling,
        )
        return out.transpose(1, 2).contiguous(), None

    attention.__name__ = f"ulysses_{kernel.__name__.removesuffix('_kernel')}"
    return attention


def _refuse_unsupported(module: Any, attention_mask: Tensor | None, kwargs: dict[str, Any]) -> None:
    if attention_mask is not None:
        raise ValueError(
            "Ulysses attention got an attention mask: pass packed rows with position_ids and no attention_mask"
        )
    if getattr(module, "is_causal", True) is False:
        raise ValueError(f"{type(module).__name__} is not causal: Ulysses attention here is causal only")
    for name in UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            raise ValueError(f"{type(module).__name__} uses {name}={kwargs[name]!r}, which Ulysses attention lacks")


ulysses_sdpa = _attention_function(sdpa_kernel)
ulysses_flash_attention_2 = _attention_function(flash_kernel)
AttentionInterface.register(ULYSSES_SDPA, ulysses_sdpa)
AttentionInterface.register(ULYSSES_FLASH, ulysses_flash_attention_2)
