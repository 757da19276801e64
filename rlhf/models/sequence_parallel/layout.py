"""Where the samples of a packed micro-batch sit, found once per micro-batch from the whole rows' position ids, in
the forms the two kernels want: contiguous chunks with their masks for sdpa, cumulative sequence lengths for the
flash-attention varlen kernel.

The rule for where a sample starts is transformers' own (``masking_utils.find_packed_sequence_indices``: a position
that does not follow its left neighbour by one), so the samples here are the ones the model's unsplit forward sees
and the ones rlhf.models.packing lays out (its row tails continue the last sample's positions, as the padding added
for sequence parallelism does).

sdpa layout: consecutive samples of a row are merged into chunks of at most ``chunk_tokens`` tokens (a longer sample
is a chunk of its own). A chunk of one sample runs the plain causal kernel with no mask; a chunk of several runs with
its own block-diagonal causal mask, ``chunk_tokens``² booleans at most, shared by every head and layer. Measured on
this CPU (fwd+bwd, 4 heads of 64, 4k tokens): one [S, S] mask costs up to 3x the per-sample loop on rows of a few
long samples (it computes every score and masks it), while one kernel call per sample costs up to 10x the mask on
rows of hundreds of short samples (call overhead); chunks of 512-2048 tokens were within noise of the better of the
two in every case.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

# The sdpa chunk size (see the module docstring): bounds a chunk's mask to 1 MiB of booleans.
SDPA_CHUNK_TOKENS = 1024


def sample_ids(position_ids: Tensor) -> Tensor:
    """``[R, W]`` index of the sample each token belongs to within its row (0, 1, ...): transformers' rule, a position
    that does not follow its left neighbour by one starts a sample. Unlike transformers' function it never returns
    None (a row of one sample is all zeros)."""
    first = position_ids[:, :1] - 1
    return (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)


@dataclass(frozen=True)
class Chunk:
    """Columns ``[start, end)`` of row ``row``; ``mask`` ``[n, n]`` (True: may attend) when it holds several samples,
    None when it holds one (the plain causal kernel)."""

    row: int
    start: int
    end: int
    mask: Tensor | None


@dataclass(frozen=True)
class SampleLayout:
    """The samples of ``rows`` packed rows of ``width`` columns (the whole rows, every sequence-parallel rank's
    columns). ``spans``: ``(row, start, end)`` of each sample in order, covering every column."""

    rows: int
    width: int
    spans: tuple[tuple[int, int, int], ...]
    device: torch.device
    chunk_tokens: int = SDPA_CHUNK_TOKENS

    @cached_property
    def chunks(self) -> tuple[Chunk, ...]:
        """The sdpa chunks (module docstring), built on first use and kept for every layer."""
        out: list[Chunk] = []
        group: list[tuple[int, int, int]] = []

        def close() -> None:
            if group:
                out.append(_chunk(group, self.device))
                group.clear()

        for span in self.spans:
            row, start, end = span
            if group and (group[0][0] != row or end - group[0][1] > self.chunk_tokens):
                close()
            group.append(span)
        close()
        return tuple(out)

    @cached_property
    def cu_seqlens(self) -> Tensor:
        """``int32 [n + 1]`` cumulative sample lengths over the rows laid end to end (flash-attention varlen)."""
        ends = [row * self.width + end for row, _, end in self.spans]
        return torch.tensor([0, *ends], dtype=torch.int32, device=self.device)

    @cached_property
    def max_seqlen(self) -> int:
        return max(end - start for _, start, end in self.spans)


def _chunk(spans: list[tuple[int, int, int]], device: torch.device) -> Chunk:
    row, start, end = spans[0][0], spans[0][1], spans[-1][2]
    if len(spans) == 1:
        return Chunk(row, start, end, None)
    lengths = torch.tensor([e - s for _, s, e in spans], device=device)
    ids = torch.repeat_interleave(torch.arange(len(spans), device=device), lengths)
    n = end - start
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return Chunk(row, start, end, (ids[:, None] == ids[None, :]) & causal)


def sample_layout(position_ids: Tensor, chunk_tokens: int = SDPA_CHUNK_TOKENS) -> SampleLayout:
    """The :class:`SampleLayout` of whole packed rows ``[R, W]`` (one host sync: the boundaries become Python ints,
    once per micro-batch rather than once per layer)."""
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be [rows, width], got shape {tuple(position_ids.shape)}")
    rows, width = position_ids.shape
    starts = torch.diff(sample_ids(position_ids), dim=-1, prepend=position_ids.new_full((rows, 1), -1)) != 0
    begins: list[list[int]] = [[] for _ in range(rows)]
    for r, c in starts.nonzero().cpu().tolist():  # row-major order: each row's starts ascending
        begins[r].append(c)
    spans = [(r, b, e) for r in range(rows) for b, e in zip(begins[r], [*begins[r][1:], width], strict=True)]
    return SampleLayout(rows, width, tuple(spans), position_ids.device, chunk_tokens)
