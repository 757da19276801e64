"""Batching samples into padded tensors: padded to the batch's longest sequence.

Prompts are left-padded (generation continues from the right edge); SFT, DPO and KTO sequences are right-padded
(OpenRLHF). Masks are token-aligned ``[B, T]``; ``action_mask`` is the same mask shifted to line up with
``log_probs_from_logits(logits[:, :-1], input_ids[:, 1:])`` (``[B, T-1]``), the shape rlhf.algo losses take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def pad(seqs: Sequence[Sequence[int]], value: int, side: str = "right", length: int | None = None) -> Tensor:
    """``[len(seqs), length or max len]`` int64 tensor, each sequence padded with ``value`` on ``side``."""
    if side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', got {side!r}")
    width = max([len(s) for s in seqs] + [length or 0])
    out = torch.full((len(seqs), width), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            t = torch.as_tensor(list(s), dtype=torch.long)
            if side == "right":
                out[i, : len(s)] = t
            else:
                out[i, width - len(s) :] = t
    return out


def _padded(seqs: Sequence[Sequence[int]], pad_id: int, side: str, length: int | None = None) -> tuple[Tensor, Tensor]:
    ids = pad(seqs, pad_id, side, length)
    attention = pad([[1] * len(s) for s in seqs], 0, side, length)
    return ids, attention


def collate_prompts(samples: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
    """Prompt batch: ``input_ids``/``attention_mask`` left-padded, plus the per-sample lists ``prompt_ids``,
    ``prompt``, ``label``, ``datasource`` and ``columns`` where the samples carry them (rollout engines take the
    unpadded ids)."""
    ids, attention = _padded([s["prompt_ids"] for s in samples], pad_id, "left")
    out: dict[str, Any] = {"input_ids": ids, "attention_mask": attention}
    for key in ("prompt_ids", "prompt", "label", "datasource"):
        out[key] = [s[key] for s in samples]
    if "columns" in samples[0]:  # rows built by rlhf.data.prompts carry them; hand-made batches may not
        out["columns"] = [s["columns"] for s in samples]
    return out


def collate_sft(samples: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
    """SFT batch, right-padded: ``input_ids``, ``attention_mask``, ``loss_mask``, ``action_mask``; packed rows
    add ``position_ids`` and ``segment_ids`` (see rlhf.data.packing.block_causal_mask)."""
    ids, attention = _padded([s["input_ids"] for s in samples], pad_id, "right")
    loss = pad([s["loss_mask"] for s in samples], 0, "right")
    out = {"input_ids": ids, "attention_mask": attention, "loss_mask": loss, "action_mask": loss[:, 1:]}
    if "segment_ids" in samples[0]:
        out["position_ids"] = pad([s["position_ids"] for s in samples], 0, "right")
        out["segment_ids"] = pad([s["segment_ids"] for s in samples], 0, "right")
    return out


def collate_preference(samples: Sequence[dict[str, Any]], pad_id: int, side: str = "right") -> dict[str, Tensor]:
    """Pair batch: ``chosen_*`` and ``rejected_*`` (``input_ids``, ``attention_mask``, ``loss_mask``,
    ``action_mask``) padded to one common length so they can be concatenated into one forward, plus
    ``prompt_len`` and ``margin`` ``[B]``."""
    width = max(len(s[k]) for s in samples for k in ("chosen_ids", "rejected_ids"))
    out: dict[str, Tensor] = {}
    for name in ("chosen", "rejected"):
        ids, attention = _padded([s[f"{name}_ids"] for s in samples], pad_id, side, width)
        loss = pad([s[f"{name}_mask"] for s in samples], 0, side, width)
        out |= {
            f"{name}_input_ids": ids,
            f"{name}_attention_mask": attention,
            f"{name}_loss_mask": loss,
            f"{name}_action_mask": loss[:, 1:],
        }
    out["prompt_len"] = torch.tensor([s["prompt_len"] for s in samples], dtype=torch.long)
    out["margin"] = torch.tensor([float(s["margin"]) for s in samples], dtype=torch.float32)
    return out


def collate_kto(samples: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
    """KTO batch, right-padded: ``input_ids``/``attention_mask``/``loss_mask``/``action_mask`` of prompt_i +
    response_i, ``desirable`` ``[B]`` bool, and ``kl_*`` the same for the mismatched pairs prompt_i +
    response_{i+1 mod B} that estimate KTO's KL term (OpenRLHF ``KTODataset.collate_fn``)."""
    n = len(samples)
    out: dict[str, Tensor] = {}
    for prefix, shift in (("", 0), ("kl_", 1)):
        seqs, masks = [], []
        for i, s in enumerate(samples):
            response = samples[(i + shift) % n]["response_ids"]
            seqs.append(list(s["prompt_ids"]) + list(response))
            mask = [0] * len(s["prompt_ids"]) + [1] * len(response)
            masks.append([0] + mask[1:] if mask else mask)  # nothing predicts the first token
        ids, attention = _padded(seqs, pad_id, "right")
        loss = pad(masks, 0, "right")
        out |= {
            f"{prefix}input_ids": ids,
            f"{prefix}attention_mask": attention,
            f"{prefix}loss_mask": loss,
            f"{prefix}action_mask": loss[:, 1:],
        }
    out["desirable"] = torch.tensor([bool(s["desirable"]) for s in samples])
    return out


COLLATORS = {"prompt": collate_prompts, "sft": collate_sft, "preference": collate_preference, "kto": collate_kto}


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, or its eos id when it has none (OpenRLHF ``get_tokenizer``)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token")
    return int(pad_id)
