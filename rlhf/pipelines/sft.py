"""Supervised fine-tuning: token-mean NLL on response tokens (OpenRLHF SFTTrainer); eval loss and perplexity."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from torch import Tensor

from rlhf.algo import sft_loss
from rlhf.models.forward import causal_lm_log_probs, forward_tokens
from rlhf.pipelines.supervised import Task
from rlhf.spec.schema import ExperimentSpec


def _log_probs(model, batch: dict[str, Tensor], packing: bool) -> Tensor:
    # Rows packed by data.packing carry their position ids: the samples are found from them (rlhf.models.forward).
    return causal_lm_log_probs(
        model, batch["input_ids"], batch["attention_mask"], position_ids=batch.get("position_ids"), packing=packing
    )


def sft_loss_fn(model, batch: dict[str, Tensor], norm, *, packing: bool = False) -> tuple[Tensor, dict]:
    """One micro-batch: ``token_mean(-log p)`` over the whole step's response tokens (the normaliser)."""
    loss = sft_loss(_log_probs(model, batch, packing), batch["action_mask"], "token_mean", norm)
    repack = packing and "position_ids" not in batch  # rows packed by data.packing run as they are
    return loss, {"loss": loss.detach(), **forward_tokens(model, batch["attention_mask"], packing=repack)}


def sft_eval_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    """Per sample: summed NLL of its response tokens and their count."""
    mask = batch["action_mask"].float()
    nll = -(_log_probs(model, batch, packing) * mask).sum(-1)
    return {"nll": nll, "tokens": mask.sum(-1)}


def row_tokens(row: dict[str, Any]) -> int:
    return len(row["input_ids"])


def sft_eval_metrics(out: dict[str, Tensor]) -> dict[str, float]:
    loss = float(out["nll"].sum() / out["tokens"].sum().clamp(min=1))
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "samples": float(len(out["nll"]))}


def make_task(spec: ExperimentSpec, tokenizer: Any) -> Task:
    from rlhf.data import collate_sft, pad_token_id

    return Task(
        family="sft",
        data_kind="sft",
        model_kind="causal_lm",
        collate=partial(collate_sft, pad_id=pad_token_id(tokenizer)),
        loss_fn=partial(sft_loss_fn, packing=spec.trainer.packing),
        mask_key="action_mask",
        eval_fn=partial(sft_eval_fn, packing=spec.trainer.packing),
        eval_metrics=sft_eval_metrics,
        progress_keys=("train/loss", "train/lr"),
        row_tokens=row_tokens,
    )
