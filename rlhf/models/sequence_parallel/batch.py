"""The batch side of sequence parallelism, pure functions: one rank's columns of a packed micro-batch, and every
rank's per-token outputs put back together.

Splitting (:func:`shard_rows`, :func:`shard_packed` for rlhf.models.packing's ``PackedBatch``):

1. the row width is padded to a multiple of the group size; the pad's position ids continue the row's last sample
   (as packing's row tails do: the pad only looks backwards, so no real token sees it) and its predictions are
   invalid, so it is out of every loss;
2. each column's next-token target is taken on the whole row *before* slicing, so no rank needs its neighbour's
   first token;
3. rank r gets the contiguous columns ``[r*L, (r+1)*L)`` of every per-token tensor (:meth:`SequenceShard.take`:
   old log-probs, advantages, masks, ... in the packed layout; :func:`pack_actions` first moves the unpacked
   ``[B, T-1]`` ones there).

Gathering: :meth:`SequenceShard.gather_actions` / :meth:`~SequenceShard.gather_tokens` all-gather a per-token output
over the group and drop the pad, giving the packed layout of the unsplit forward; ``PackedBatch.unpack_shifted`` /
``unpack`` then give the trainer's unpacked ``[B, T-1]`` / ``[B, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf.models.packing import PackedBatch
from rlhf.models.sequence_parallel.comm import gather_columns, gather_columns_for_loss

PAD_ID = 0  # the pad columns' token id: any id does, nothing reads their outputs


@dataclass(frozen=True)
class SequenceShard:
    """Rank ``rank``'s share of ``R`` packed rows of ``width`` columns split over ``size`` ranks.

    ``position_ids`` are the whole padded rows (every rank needs them: the attention's sample layout); the other
    tensors are this rank's ``L = (width + pad) / size`` columns. ``targets[:, j]`` is the token after column j
    (``PAD_ID`` where there is none), ``valid[:, j]`` whether that prediction is a token of column j's own sample.
    ``tokens``: valid predictions in the whole rows (every rank's columns): the micro-batch's token count."""

    size: int
    rank: int
    width: int
    pad: int
    position_ids: Tensor  # [R, width + pad]
    input_ids: Tensor  # [R, L]
    local_position_ids: Tensor  # [R, L]
    targets: Tensor  # [R, L]
    valid: Tensor  # [R, L] bool
    tokens: int

    @property
    def columns(self) -> slice:
        """This rank's columns of the padded rows."""
        per = (self.width + self.pad) // self.size
        return slice(self.rank * per, (self.rank + 1) * per)

    def take(self, x: Tensor, fill: float = 0) -> Tensor:
        """This rank's columns of a per-token tensor ``[R, W', ...]`` in the packed layout, action-aligned
        (``W' = width - 1``), token-aligned (``width``) or padded (``width + pad``); missing columns are ``fill``."""
        full = self.width + self.pad
        if x.shape[1] not in (self.width - 1, self.width, full):
            raise ValueError(f"a per-token tensor of {x.shape[1]} columns for rows of {self.width} (+{self.pad} pad)")
        grow = full - x.shape[1]
        if grow:
            x = F.pad(x.movedim(1, -1), (0, grow), value=fill).movedim(-1, 1)
        return x[:, self.columns]

    def join(self, parts: list[Tensor]) -> Tensor:
        """The ranks' ``[R, L, ...]`` columns, in rank order, as ``[R, width, ...]`` (the pad dropped)."""
        if len(parts) != self.size:
            raise ValueError(f"{len(parts)} ranks' columns for a group of {self.size}")
        return torch.cat(parts, dim=1)[:, : self.width]

    def gather_tokens(self, local: Tensor, group, *, for_loss: bool = False) -> Tensor:
        """Every rank's ``[R, L, ...]`` -> ``[R, width, ...]`` (the pad dropped): token-aligned outputs (values).
        Collective over ``group`` when ``size > 1``; not differentiable, unless ``for_loss``: then every rank must
        compute the same loss of the result (rlhf.models.sequence_parallel.comm.gather_columns_for_loss)."""
        if self.size == 1:
            return (local if for_loss else local.detach())[:, : self.width]
        gather = gather_columns_for_loss if for_loss else gather_columns
        return gather(local, group)[:, : self.width]

    def gather_actions(self, local: Tensor, group, *, for_loss: bool = False) -> Tensor:
        """Every rank's ``[R, L, ...]`` -> ``[R, width - 1, ...]``: outputs at the targets (log-probs, entropy), in
        the layout of the unsplit forward's ``logits[:, :-1]`` (``PackedBatch.unpack_shifted`` takes it)."""
        return self.gather_tokens(local, group, for_loss=for_loss)[:, : self.width - 1]


def shard_rows(
    input_ids: Tensor, position_ids: Tensor, valid_actions: Tensor, *, size: int, rank: int
) -> SequenceShard:
    """Rank ``rank``'s share of packed rows ``input_ids`` / ``position_ids`` ``[R, W]`` (positions restarting at each
    sample) split over ``size`` ranks; ``valid_actions`` ``[R, W-1]``: entry j true when predicting token j+1 counts
    (a real token of the same sample)."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"sequence-parallel rank {rank} of size {size}")
    rows, width = input_ids.shape
    if position_ids.shape != input_ids.shape or valid_actions.shape != (rows, width - 1):
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)}, position_ids {tuple(position_ids.shape)} and valid_actions "
            f"{tuple(valid_actions.shape)}: expected [R, W], [R, W] and [R, W-1]"
        )
    pad = -width % size
    steps = torch.arange(1, pad + 1, device=position_ids.device)
    positions = torch.cat([position_ids, position_ids[:, -1:] + steps], dim=1)
    ids = F.pad(input_ids, (0, pad), value=PAD_ID)
    targets = F.pad(input_ids[:, 1:], (0, pad + 1), value=PAD_ID)  # shifted on the whole row, before slicing
    valid = F.pad(valid_actions.bool(), (0, pad + 1), value=False)
    per = (width + pad) // size
    mine = slice(rank * per, (rank + 1) * per)
    return SequenceShard(
        size=size,
        rank=rank,
        width=width,
        pad=pad,
        position_ids=positions,
        input_ids=ids[:, mine],
        local_position_ids=positions[:, mine],
        targets=targets[:, mine],
        valid=valid[:, mine],
        tokens=int(valid_actions.sum()),
    )


def valid_actions(packed: PackedBatch) -> Tensor:
    """``[R, W-1]``: the packed columns whose next token is the same sample's (a real token, not a sample's last)."""
    rows, width = packed.input_ids.shape
    out = torch.zeros(rows, width, dtype=torch.bool, device=packed.input_ids.device)
    keep = ~packed.last
    out[packed.dst_row[keep], packed.dst_col[keep]] = True
    return out[:, :-1]


def shard_packed(packed: PackedBatch, *, size: int, rank: int) -> SequenceShard:
    """:func:`shard_rows` of a ``PackedBatch`` (rlhf.models.packing.pack; ``varlen=True`` for one row)."""
    return shard_rows(packed.input_ids, packed.position_ids, valid_actions(packed), size=size, rank=rank)


def pack_actions(packed: PackedBatch, x: Tensor, fill: float = 0) -> Tensor:
    """An action-aligned tensor of the padded batch ``[B, T-1, ...]`` (old log-probs, advantages, action masks) in
    the packed layout ``[R, W-1, ...]``: the inverse of ``PackedBatch.unpack_shifted`` (``fill`` where no sample's
    prediction is)."""
    rows, width = packed.input_ids.shape
    out = x.new_full((rows, width, *x.shape[2:]), fill)
    keep = ~packed.last
    out[packed.dst_row[keep], packed.dst_col[keep]] = x[packed.src_row[keep], packed.src_col[keep]]
    return out[:, :-1]
