"""Packed sequences for the model forwards: the real tokens of a padded batch laid back to back in fewer rows, with
position ids restarting at every sample, and the outputs put back where the padded batch had them.

Sample boundaries: transformers' own packed-sequence support. A model on transformers' attention interface
(``PreTrainedModel.is_backend_compatible()``: Llama, Qwen2/3, Mistral, Gemma, GPT-2, ...) called with
``position_ids`` and *no* attention mask finds the samples from the position ids (a position that does not follow
its left neighbour starts a new sample: ``transformers.masking_utils.find_packed_sequence_indices``) and builds the
mask its attention kernel needs: a block-diagonal causal mask for sdpa, eager and flex attention, the cumulative
sequence lengths of the varlen kernel for flash-attention 2/3. One mechanism for every kernel, the mask never built
here, and nothing that could drift from what the model's own code does.

Row layout, chosen by the kernel:

* flash-attention (varlen): one row holding every token (transformers hands flash-attention varlen one packed row;
  its kernel computes no score across samples, so the row's length costs nothing extra);
* sdpa / eager / flex: these compute the whole row-by-row score matrix and mask it, so one long row would cost
  (total tokens)^2. Samples are laid first-fit-decreasing into rows as wide as the longest sample: never more rows
  than the padded batch, of the same width, so packing never costs more than padding and removes most of it.

Padding left in a row's tail continues the last sample's positions (so a row holding one sample keeps the plain
causal kernel); its outputs belong to no sample and are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

# Attention implementations whose packed-sequence masks transformers builds from position ids.
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
PACKABLE_ATTENTION = ("sdpa", "eager", "flex_attention", *VARLEN_ATTENTION)


def base_model(model: Any) -> Any:
    """The Hugging Face model inside an engine wrapper (DeepSpeed's ``.module``) or a peft model."""
    model = getattr(model, "module", model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def attention_kind(model: Any) -> str | None:
    """The attention implementation the model runs (``config._attn_implementation``: transformers keeps the
    resolved kernel only under this name), or None when packing cannot be trusted for it: a model class not on
    transformers' attention interface (e.g. remote code) may build its own mask and let samples see each other."""
    base = base_model(model)
    compatible = getattr(type(base), "is_backend_compatible", None)
    if not callable(compatible) or not compatible():
        return None
    kind = getattr(getattr(base, "config", None), "_attn_implementation", None)
    return kind if kind in PACKABLE_ATTENTION else None


def first_fit_rows(lengths: list[int], width: int) -> list[list[int]]:
    """Sample indices per row: first-fit decreasing into rows of ``width`` tokens (a longer sample gets a row of its
    own). Pure; ties keep the input order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    free: list[int] = []
    for i in order:
        n = lengths[i]
        for r, f in enumerate(free):
            if n <= f:
                rows[r].append(i)
                free[r] -= n
                break
        else:
            rows.append([i])
            free.append(width - n)
    return rows


@dataclass(frozen=True)
class PackedBatch:
    """A padded ``[B, T]`` batch as packed ``[R, W]`` rows, and the maps between the two layouts.

    ``src_*`` index each real token in the padded batch, ``dst_*`` the same token in the packed rows (in the same
    order); ``last`` marks each sample's last token, whose next-token outputs predict no token of its own sample.
    """

    input_ids: Tensor  # [R, W]
    position_ids: Tensor  # [R, W]
    src_row: Tensor  # [N]
    src_col: Tensor  # [N]
    dst_row: Tensor  # [N]
    dst_col: Tensor  # [N]
    last: Tensor  # [N] bool
    shape: tuple[int, int]  # (B, T) of the padded batch

    @property
    def real_tokens(self) -> int:
        return int(self.src_row.numel())

    @property
    def computed_tokens(self) -> int:
        return int(self.input_ids.numel())

    def unpack(self, packed: Tensor, fill: float = 0.0) -> Tensor:
        """Token-aligned outputs ``[R, W, ...]`` back to ``[B, T, ...]`` (``fill`` on padding)."""
        out = packed.new_full((*self.shape, *packed.shape[2:]), fill)
        out[self.src_row, self.src_col] = packed[self.dst_row, self.dst_col]
        return out

    def unpack_shifted(self, packed: Tensor, fill: float = 0.0) -> Tensor:
        """Action-aligned outputs ``[R, W-1, ...]`` (entry j: predicting token j+1 of the row) back to
        ``[B, T-1, ...]``; entries that would predict across a sample boundary (or padding) are ``fill``."""
        keep = ~self.last
        b, t = self.shape
        out = packed.new_full((b, t - 1, *packed.shape[2:]), fill)
        out[self.src_row[keep], self.src_col[keep]] = packed[self.dst_row[keep], self.dst_col[keep]]
        return out


def _spans(attention_mask: Tensor) -> tuple[Tensor, Tensor] | None:
    """(start, length) of each row's real tokens, or None when some row's tokens are not one contiguous span."""
    mask = attention_mask.bool()
    lengths = mask.sum(dim=1)
    starts = mask.long().argmax(dim=1)
    cols = torch.arange(mask.shape[1], device=mask.device)
    inside = (cols >= starts[:, None]) & (cols < (starts + lengths)[:, None])
    return (starts, lengths) if torch.equal(inside, mask) else None


def plan_rows(lengths: list[int], varlen: bool) -> tuple[list[list[int]], int]:
    """(sample indices per row, row width) for a kernel: one row of every token for varlen attention, else
    first-fit-decreasing rows as wide as the longest sample. Empty samples are left out."""
    present = [i for i, n in enumerate(lengths) if n > 0]
    if not present:
        return [], 0
    if varlen:
        return [present], sum(lengths[i] for i in present)
    width = max(lengths)
    rows = first_fit_rows([lengths[i] for i in present], width)
    return [[present[j] for j in row] for row in rows], width


def pack(input_ids: Tensor, attention_mask: Tensor, *, varlen: bool = False) -> PackedBatch | None:
    """The packed form of a padded batch (left or right padding), or None when it cannot be packed (a row with
    gaps in its attention mask, or no real token at all)."""
    spans = _spans(attention_mask)
    if spans is None:
        return None
    starts, lengths = spans
    rows, width = plan_rows(lengths.tolist(), varlen)
    if not rows:
        return None
    device = input_ids.device
    sample = [i for row in rows for i in row]
    row_of = [r for r, row in enumerate(rows) for _ in row]
    offset = [o for row in rows for o in _offsets([int(lengths[i]) for i in row])]
    n = lengths[sample]
    idx = torch.as_tensor(sample, device=device)
    src_row = torch.repeat_interleave(idx, n)
    within = torch.arange(int(n.sum()), device=device) - torch.repeat_interleave(n.cumsum(0) - n, n)
    src_col = torch.repeat_interleave(starts[idx], n) + within
    dst_row = torch.repeat_interleave(torch.as_tensor(row_of, device=device), n)
    dst_col = torch.repeat_interleave(torch.as_tensor(offset, device=device), n) + within
    last = within == torch.repeat_interleave(n - 1, n)
    packed_ids = torch.zeros(len(rows), width, dtype=input_ids.dtype, device=device)
    packed_ids[dst_row, dst_col] = input_ids[src_row, src_col]
    # A row's tail continues its last sample's positions: no extra boundary, and a row of one sample stays causal.
    position_ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    position_ids[dst_row, dst_col] = within
    used = torch.bincount(dst_row, minlength=len(rows))[:, None]  # samples sit from column 0 on, back to back
    cols = torch.arange(width, device=device)[None, :]
    after_last = position_ids.gather(1, used - 1) + 1 + cols - used
    position_ids = torch.where(cols >= used, after_last, position_ids)
    return PackedBatch(
        input_ids=packed_ids,
        position_ids=position_ids,
        src_row=src_row,
        src_col=src_col,
        dst_row=dst_row,
        dst_col=dst_col,
        last=last,
        shape=(int(input_ids.shape[0]), int(input_ids.shape[1])),
    )


def _offsets(lengths: list[int]) -> list[int]:
    out, at = [], 0
    for n in lengths:
        out.append(at)
        at += n
    return out


def pack_for(model: Any, input_ids: Tensor, attention_mask: Tensor | None) -> PackedBatch | None:
    """:func:`pack` in the layout ``model``'s attention wants, or None when the model's attention cannot take
    packed rows (:func:`attention_kind`) or the batch cannot be packed; the caller then runs the padded batch."""
    if attention_mask is None:
        return None
    kind = attention_kind(model)
    if kind is None:
        return None
    return pack(input_ids, attention_mask, varlen=kind in VARLEN_ATTENTION)
