"""Packing several SFT samples into one row, with the boundaries kept.

A packed row holds whole samples back to back: ``position_ids`` restart at 0 for each sample, ``segment_ids``
number the samples 1, 2, ... (0 is padding), and each sample's first token has loss mask 0 (it must not be
predicted from the previous sample). Attention must not cross samples: pass ``position_ids`` to a varlen
(flash-attention) model, or the 4-D mask from :func:`block_causal_mask` to an sdpa/eager one.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from torch import Tensor


def pack_samples(data: Dataset, max_len: int) -> Dataset:
    """Greedy, order-preserving: a new row starts when the next sample does not fit in ``max_len`` tokens."""
    rows: dict[str, list[list[int]]] = {"input_ids": [], "loss_mask": [], "position_ids": [], "segment_ids": []}
    current: dict[str, list[int]] = {k: [] for k in rows}

    def flush() -> None:
        if current["input_ids"]:
            for k in rows:
                rows[k].append(current[k])
                current[k] = []

    for batch in data.iter(batch_size=1024):
        for ids, mask in zip(batch["input_ids"], batch["loss_mask"], strict=True):
            if len(current["input_ids"]) + len(ids) > max_len:
                flush()
            segment = (current["segment_ids"][-1] if current["segment_ids"] else 0) + 1
            current["input_ids"] += ids
            current["loss_mask"] += [0] + list(mask[1:])
            current["position_ids"] += list(range(len(ids)))
            current["segment_ids"] += [segment] * len(ids)
    flush()
    return Dataset.from_dict(rows)


def block_causal_mask(segment_ids: Tensor) -> Tensor:
    """``[B, 1, T, T]`` boolean mask (True: may attend): causal within each sample, nothing across samples.
    Padding (segment 0) attends only to itself, so no softmax row is empty."""
    seg = segment_ids
    same = seg[:, :, None] == seg[:, None, :]
    t = seg.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=seg.device).tril()
    eye = torch.eye(t, dtype=torch.bool, device=seg.device)
    real = (seg > 0)[:, :, None]
    return ((same & causal & real) | eye).unsqueeze(1)
