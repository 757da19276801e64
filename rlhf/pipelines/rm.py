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
from rlhf.models.forward import forward_tokens, value_model_token_values
from rlhf.models.value_head import sequence_rewards
from rlhf.pipelines.supervised import PAIR_KEY, Task, pair_tokens, step_share
from rlhf.spec.schema import ExperimentSpec


def _pair_masks(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    ids = torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]])
    return ids, torch.cat([batch["chosen_attention_mask"], batch["rejected_attention_mask"]])


def pair_rewards(model, batch: dict[str, Tensor], packing: bool = False) -> tuple[Tensor, Tensor]:
    """Chosen and rejected rewards ``[B]`` each, from one forward over both halves (packed when asked)."""
    ids, mask = _pair_masks(batch)
    rewards = sequence_rewards(value_model_token_values(model, ids, mask, packing=packing), mask).float()
    return rewards.chunk(2)


def rm_loss_fn(model, batch: dict[str, Tensor], norm, *, loss: str, use_margin: bool, packing: bool = False):
    """The pairwise loss, as this micro-batch's share of the whole step's mean over pairs (supervised.step_share:
    micro-batches of different sizes under a token budget); its metrics weighted the same way."""
    chosen, rejected = pair_rewards(model, batch, packing)
    share = step_share(chosen.shape[0], norm)
    value = RM_LOSSES.get(loss)(chosen, rejected, batch["margin"] if use_margin else None) * share
    gap = (chosen - rejected).detach()
    return value, {
        "loss": value.detach(),
        "acc": (gap > 0).float().mean() * share,
        "chosen_reward": chosen.detach().mean() * share,
        "rejected_reward": rejected.detach().mean() * share,
        "margin": gap.mean() * share,
        **forward_tokens(model, _pair_masks(batch)[1], packing=packing),
    }


def rm_eval_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    chosen, rejected = pair_rewards(model, batch, packing)
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
        loss_fn=partial(rm_loss_fn, **opts, packing=spec.trainer.packing),
        mask_key=PAIR_KEY,
        eval_fn=partial(rm_eval_fn, packing=spec.trainer.packing),
        eval_metrics=partial(rm_eval_metrics, **opts),
        progress_keys=("train/loss", "train/acc"),
        init_value_head=True,
        final_config=reward_stats,
        row_tokens=pair_tokens,
    )
