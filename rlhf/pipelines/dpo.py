"""Direct preference optimisation and its relatives (cDPO, IPO, KTO, SimPO, ORPO; OpenRLHF DPOTrainer).

The frozen reference's sequence log-probs are computed on the reference ranks (fused into the policy's processes
when colocated) and merged into each micro-batch before the policy's step. Eval: loss, reward accuracy and margins
of the implicit rewards over the whole held-out set.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from rlhf.algo import PREFERENCE_LOSSES, PreferenceInputs, nll_regularizer, preference_accuracy
from rlhf.models.forward import causal_lm_log_probs, forward_tokens
from rlhf.pipelines.supervised import PAIR_KEY, Task, pair_tokens, step_share
from rlhf.spec.names import REFERENCE_FREE_PREFERENCE_LOSSES
from rlhf.spec.schema import ExperimentSpec, PreferenceSpec


def loss_kwargs(p: PreferenceSpec) -> dict[str, Any]:
    """The hyper-parameters each registered preference loss takes."""
    return {
        "dpo": {"beta": p.beta, "label_smoothing": p.label_smoothing},
        "cdpo": {"beta": p.beta, "label_smoothing": p.label_smoothing},
        "ipo": {"beta": p.beta},
        "simpo": {"beta": p.beta, "gamma": p.simpo_gamma},
        "orpo": {"lambd": p.orpo_lambda},
        "kto": {
            "beta": p.beta,
            "desirable_weight": p.kto_desirable_weight,
            "undesirable_weight": p.kto_undesirable_weight,
        },
    }[p.loss]


def _sequence_logps(
    model, parts: list[tuple[Tensor, Tensor, Tensor]], packing: bool = False
) -> tuple[list[Tensor], list[Tensor]]:
    """One forward over the concatenated ``(input_ids, attention_mask, action_mask)`` parts (right-padded to one
    width; packed rows when ``packing``); per part: summed response log-probs ``[B]`` and response lengths ``[B]``."""
    width = max(p[0].shape[1] for p in parts)
    ids = torch.cat([_right_pad(p[0], width) for p in parts])
    mask = torch.cat([_right_pad(p[1], width) for p in parts])
    action = torch.cat([_right_pad(p[2], width - 1) for p in parts]).float()
    logps = causal_lm_log_probs(model, ids, mask, packing=packing)
    sums, lengths = (logps * action).sum(-1), action.sum(-1)
    sizes = [p[0].shape[0] for p in parts]
    return list(sums.split(sizes)), list(lengths.split(sizes))


def _right_pad(t: Tensor, width: int) -> Tensor:
    # Padded positions are masked out of attention and loss, so the pad value does not matter.
    return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t


def _pair_parts(batch: dict[str, Tensor]) -> list[tuple[Tensor, Tensor, Tensor]]:
    return [
        (batch[f"{n}_input_ids"], batch[f"{n}_attention_mask"], batch[f"{n}_action_mask"])
        for n in ("chosen", "rejected")
    ]


# -- paired losses (dpo, cdpo, ipo, simpo, orpo) ---------------------------------------------------------------------
def pair_reference_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    (chosen, rejected), _ = _sequence_logps(model, _pair_parts(batch), packing)
    return {"ref_chosen": chosen, "ref_rejected": rejected}


def _pair_inputs(batch: dict[str, Tensor], sums: list[Tensor], lengths: list[Tensor]) -> PreferenceInputs:
    return PreferenceInputs(
        policy_chosen=sums[0],
        policy_rejected=sums[1],
        reference_chosen=batch.get("ref_chosen"),
        reference_rejected=batch.get("ref_rejected"),
        chosen_lengths=lengths[0],
        rejected_lengths=lengths[1],
    )


def _pair_loss(inputs: PreferenceInputs, loss: str, kwargs: dict[str, Any], nll_coef: float):
    out = PREFERENCE_LOSSES.get(loss)(inputs, **kwargs)
    total = out.loss
    if nll_coef:
        total = total + nll_coef * nll_regularizer(inputs.policy_chosen, inputs.chosen_lengths)
    return total, out


def _pair_metrics(total: Tensor, out) -> dict[str, Tensor]:
    c, r = out.chosen_rewards, out.rejected_rewards
    return {
        "loss": total.detach(),
        "acc": preference_accuracy(c, r),
        "chosen_reward": c.mean(),
        "rejected_reward": r.mean(),
        "margin": (c - r).mean(),
    }


def pair_loss_fn(
    model, batch: dict[str, Tensor], norm, *, loss: str, kwargs: dict[str, Any], nll_coef: float, packing: bool = False
):
    """The pair loss as this micro-batch's share of the step's mean over pairs (supervised.step_share), metrics
    weighted the same way."""
    parts = _pair_parts(batch)
    sums, lengths = _sequence_logps(model, parts, packing)
    total, out = _pair_loss(_pair_inputs(batch, sums, lengths), loss, kwargs, nll_coef)
    share = step_share(sums[0].shape[0], norm)
    metrics = {k: v * share for k, v in _pair_metrics(total, out).items()}
    total = total * share
    mask = torch.cat([batch["chosen_attention_mask"], batch["rejected_attention_mask"]])
    return total, {**metrics, **forward_tokens(model, mask, packing=packing)}


def pair_eval_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    sums, lengths = _sequence_logps(model, _pair_parts(batch), packing)
    out = {
        "policy_chosen": sums[0],
        "policy_rejected": sums[1],
        "chosen_lengths": lengths[0],
        "rejected_lengths": lengths[1],
    }
    for k in ("ref_chosen", "ref_rejected"):
        if k in batch:
            out[k] = batch[k]
    return out


def pair_eval_metrics(out: dict[str, Tensor], *, loss: str, kwargs: dict[str, Any], nll_coef: float):
    batch = {k: v for k, v in out.items() if k.startswith("ref_")}
    inputs = _pair_inputs(
        batch, [out["policy_chosen"], out["policy_rejected"]], [out["chosen_lengths"], out["rejected_lengths"]]
    )
    total, res = _pair_loss(inputs, loss, kwargs, nll_coef)
    return {k: float(v) for k, v in _pair_metrics(total, res).items()}


# -- KTO (unpaired desirable / undesirable samples) ----------------------------------------------------------------
def _kto_parts(batch: dict[str, Tensor]) -> list[tuple[Tensor, Tensor, Tensor]]:
    return [(batch[f"{p}input_ids"], batch[f"{p}attention_mask"], batch[f"{p}action_mask"]) for p in ("", "kl_")]


def kto_reference_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    (logps, kl), _ = _sequence_logps(model, _kto_parts(batch), packing)
    return {"ref_logps": logps, "ref_kl": kl}


def _kto(batch: dict[str, Tensor], logps: Tensor, kl: Tensor, kwargs: dict[str, Any], distributed: bool):
    d = batch["desirable"].bool()
    inputs = PreferenceInputs(
        policy_chosen=logps[d],
        policy_rejected=logps[~d],
        reference_chosen=batch["ref_logps"][d],
        reference_rejected=batch["ref_logps"][~d],
        policy_kl=kl,
        reference_kl=batch["ref_kl"],
    )
    world = dist.get_world_size() if distributed and dist.is_initialized() else 1
    out = PREFERENCE_LOSSES.get("kto")(
        inputs, **kwargs, all_reduce=dist.all_reduce if world > 1 else None, world_size=world
    )
    metrics = {
        "loss": out.loss.detach(),
        "desirable_reward": out.chosen_rewards.mean() if d.any() else torch.tensor(0.0),
        "undesirable_reward": out.rejected_rewards.mean() if (~d).any() else torch.tensor(0.0),
        "kl": out.kl if out.kl is not None else torch.tensor(0.0),
    }
    return out.loss, metrics


def kto_loss_fn(model, batch: dict[str, Tensor], norm, *, kwargs: dict[str, Any], packing: bool = False):
    (logps, kl), _ = _sequence_logps(model, _kto_parts(batch), packing)
    return _kto(batch, logps, kl, kwargs, distributed=True)


def kto_eval_fn(model, batch: dict[str, Tensor], *, packing: bool = False) -> dict[str, Tensor]:
    (logps, kl), _ = _sequence_logps(model, _kto_parts(batch), packing)
    return {
        "logps": logps,
        "kl": kl,
        "ref_logps": batch["ref_logps"],
        "ref_kl": batch["ref_kl"],
        "desirable": batch["desirable"].float(),
    }


def kto_eval_metrics(out: dict[str, Tensor], *, kwargs: dict[str, Any]) -> dict[str, float]:
    batch = {"desirable": out["desirable"], "ref_logps": out["ref_logps"], "ref_kl": out["ref_kl"]}
    _, metrics = _kto(batch, out["logps"], out["kl"], kwargs, distributed=False)
    d = out["desirable"].bool()
    reward = kwargs["beta"] * (out["logps"] - out["ref_logps"])
    # Accuracy for unpaired data: a desirable sample's implicit reward is positive, an undesirable one's negative.
    metrics["acc"] = ((reward > 0) == d).float().mean()
    return {k: float(v) for k, v in metrics.items()}


def make_task(spec: ExperimentSpec, tokenizer: Any) -> Task:
    from rlhf.data import collate_kto, collate_preference, pad_token_id

    p = spec.algorithm.preference
    kwargs = loss_kwargs(p)
    pad_id = pad_token_id(tokenizer)
    packing = spec.trainer.packing
    if p.loss == "kto":  # micro-batches of a fixed size: KTO's KL term pairs samples within one
        return Task(
            family="dpo",
            data_kind="kto",
            model_kind="causal_lm",
            collate=partial(collate_kto, pad_id=pad_id),
            loss_fn=partial(kto_loss_fn, kwargs=kwargs, packing=packing),
            mask_key=None,
            eval_fn=partial(kto_eval_fn, packing=packing),
            eval_metrics=partial(kto_eval_metrics, kwargs=kwargs),
            progress_keys=("train/loss", "train/kl"),
            reference_fn=partial(kto_reference_fn, packing=packing),
        )
    opts = {"loss": p.loss, "kwargs": kwargs, "nll_coef": p.nll_coef}
    return Task(
        family="dpo",
        data_kind="preference",
        model_kind="causal_lm",
        collate=partial(collate_preference, pad_id=pad_id),
        loss_fn=partial(pair_loss_fn, **opts, packing=packing),
        mask_key=PAIR_KEY,
        eval_fn=partial(pair_eval_fn, packing=packing),
        eval_metrics=partial(pair_eval_metrics, **opts),
        progress_keys=("train/loss", "train/acc"),
        reference_fn=(
            None if p.loss in REFERENCE_FREE_PREFERENCE_LOSSES else partial(pair_reference_fn, packing=packing)
        ),
        row_tokens=pair_tokens,
    )
