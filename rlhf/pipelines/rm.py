"""Reward model training: pairwise loss on (chosen, rejected) rewards at the last token (OpenRLHF RewardModelTrainer).

Eval: accuracy, loss, and the mean/std of all rewards, which are written into the saved model's config.json
(``mean``, ``std``) for reward normalisation in RL (``reward.normalize``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor

from rlhf.algo import RM_LOSSES
from rlhf.models.value_head import sequence_rewards
from rlhf.pipelines.supervised import Task
from rlhf.spec.schema import ExperimentSpec


def pair_rewards(model, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Chosen and rejected rewards ``[B]`` each, from one forward over both halves."""
    ids = torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]])
    mask = torch.cat([batch["chosen_attention_mask"], batch["rejected_attention_mask"]])
    rewards = sequence_rewards(model(input_ids=ids, attention_mask=mask), mask).float()
    return rewards.chunk(2)


def rm_loss_fn(model, batch: dict[str, Tensor], norm, *, loss: str, use_margin: bool):
    chosen, rejected = pair_rewards(model, batch)
    value = RM_LOSSES.get(loss)(chosen, rejected, batch["margin"] if use_margin else None)
    gap = (chosen - rejected).detach()
    return value, {
        "loss": value.detach(),
        "acc": (gap > 0).float().mean(),
        "chosen_reward": chosen.detach().mean(),
        "rejected_reward": rejected.detach().mean(),
        "margin": gap.mean(),
    }


def rm_eval_fn(model, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    chosen, rejected = pair_rewards(model, batch)
    return {"chosen": chosen, "rejected": rejected, "data_margin": batch["margin"]}


def rm_eval_metrics(out: dict[str, Tensor], *, loss: str, use_margin: bool) -> dict[str, float]:
    chosen, rejected = out["chosen"], out["rejected"]
    rewards = torch.cat([chosen, rejected])
    value = RM_LOSSES.get(loss)(chosen, rejected, out["data_margin"] if use_margin else None)
    return {
        "loss": float(value),
        "acc": float((chosen > rejected).float().mean()),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std().clamp(min=1e-8)),
        "chosen_reward": float(chosen.mean()),
        "rejected_reward": float(rejected.mean()),
        "margin": float((chosen - rejected).mean()),
    }


def reward_stats(metrics: dict[str, float]) -> dict[str, Any]:
    """config.json entries of the saved reward model (OpenRLHF writes config.mean / config.std)."""
    return {"mean": metrics["eval/reward_mean"], "std": metrics["eval/reward_std"]}


def make_task(spec: ExperimentSpec, tokenizer: Any) -> Task:
    from rlhf.data import collate_preference, pad_token_id

    opts = {"loss": spec.algorithm.rm.loss, "use_margin": spec.algorithm.rm.use_margin}
    return Task(
        family="rm",
        data_kind="preference",
        model_kind="reward",
        collate=partial(collate_preference, pad_id=pad_token_id(tokenizer)),
        loss_fn=partial(rm_loss_fn, **opts),
        mask_key=None,
        eval_fn=rm_eval_fn,
        eval_metrics=partial(rm_eval_metrics, **opts),
        progress_keys=("train/loss", "train/acc"),
        init_value_head=True,
        final_config=reward_stats,
    )
