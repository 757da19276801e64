"""Supervised fine-tuning: token-mean NLL on response tokens (OpenRLHF SFTTrainer); eval loss and perplexity."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from torch import Tensor

from rlhf.algo import sft_loss
from rlhf.models.forward import causal_lm_log_probs
from rlhf.pipelines.supervised import Task
from rlhf.spec.schema import ExperimentSpec


def _log_probs(model, batch: dict[str, Tensor]) -> Tensor:
    if "segment_ids" in batch:  # packed rows: attention stays within each sample
        from rlhf.data import block_causal_mask

        return causal_lm_log_probs(
            model, batch["input_ids"], block_causal_mask(batch["segment_ids"]), position_ids=batch["position_ids"]
        )
    return causal_lm_log_probs(model, batch["input_ids"], batch["attention_mask"])


def sft_loss_fn(model, batch: dict[str, Tensor], norm) -> tuple[Tensor, dict[str, Tensor]]:
    """One micro-batch: ``token_mean(-log p)`` over the whole step's response tokens (the normaliser)."""
    loss = sft_loss(_log_probs(model, batch), batch["action_mask"], "token_mean", norm)
    return loss, {"loss": loss.detach()}


def sft_eval_fn(model, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Per sample: summed NLL of its response tokens and their count."""
    mask = batch["action_mask"].float()
    nll = -(_log_probs(model, batch) * mask).sum(-1)
    return {"nll": nll, "tokens": mask.sum(-1)}


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
        loss_fn=sft_loss_fn,
        mask_key="action_mask",
        eval_fn=sft_eval_fn,
        eval_metrics=sft_eval_metrics,
        progress_keys=("train/loss", "train/lr"),
    )
