"""Forward passes shared by every engine: per-token log-probs of a causal LM, values and rewards of a value model.

Action-aligned outputs are ``[B, T-1]``: entry t scores token t+1 given tokens 0..t (OpenRLHF's convention).

``packing=True`` runs the batch as packed rows (rlhf.models.packing: position ids restarting per sample, the
boundaries kept by transformers' packed-sequence masks) and returns the outputs in the padded layout, so callers and
losses never see the difference; where the model's attention cannot take packed rows the padded batch runs. Rows
that arrive already packed (``data.packing``: several SFT samples per row) pass their ``position_ids``.

Log-probs and entropy never hold the whole micro-batch's logits: the output head scores the targets chunk by chunk,
in the backward too (rlhf.models.head_scores).

Sequence parallelism: inside an engine's scope (rlhf.models.sequence_parallel.runtime.splitting, SP size > 1) each
forward packs its micro-batch into one row, runs this rank's columns of it inside the Ulysses context, and gathers
the per-token outputs back over the SP group (differentiably), so every caller gets the whole ``[B, T-1]`` /
``[B, T]`` outputs it gets without the split, and the same loss computed on them is exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf.algo.logprobs import TokenScores
from rlhf.models.head_scores import token_scores
from rlhf.models.packing import VARLEN_ATTENTION, PackedBatch, attention_kind, pack, pack_for, plan_rows
from rlhf.models.sequence_parallel.batch import SequenceShard, shard_packed, shard_rows
from rlhf.models.sequence_parallel.runtime import Splitting, active
from rlhf.models.value_head import normalize, position_ids_from_mask, sequence_rewards


def causal_lm_scores(
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    *,
    temperature: float = 1.0,
    entropy_temperatures: tuple[float, ...] = (),
    entropy_grads: tuple[bool, ...] | None = None,
    sum_pi_squared: bool = False,
    position_ids: Tensor | None = None,
    packing: bool = False,
) -> TokenScores:
    """``log π(x_{t+1} | x_{≤t})`` for t = 0..T-2, shape ``[B, T-1]``, and, where asked, the entropy of each step's
    distribution at each of ``entropy_temperatures`` (1: untempered; the sampling temperature: the distribution
    sampled from; ``entropy_grads``: which a loss differentiates, None: all) and its ``Σπ²`` at ``temperature`` (no
    gradient), the same shape. Positions come from a 2-D mask,
    so left padding is fine; rows packed beforehand pass their ``position_ids`` (the mask is then ignored: the
    samples are found from the positions). ``packing``: see the module docstring (0 at padding positions)."""
    temps = tuple(entropy_temperatures)
    split = active()
    if split is not None:
        return _split_scores(
            split, model, input_ids, attention_mask, position_ids, temperature, temps, entropy_grads, sum_pi_squared
        )
    packed = pack_for(model, input_ids, attention_mask) if packing and position_ids is None else None
    if packed is not None:
        ids, kwargs = packed.input_ids, {"position_ids": packed.position_ids}
    elif position_ids is not None:
        ids, kwargs = input_ids, {"position_ids": position_ids}
    else:
        ids, kwargs = (
            input_ids,
            {"attention_mask": attention_mask, "position_ids": position_ids_from_mask(attention_mask)},
        )
    targets = F.pad(ids[:, 1:], (0, 1))  # the last position predicts nothing here: its score is dropped
    scores = token_scores(
        model,
        ids,
        targets,
        temperature=temperature,
        entropy_temperatures=temps,
        entropy_grads=entropy_grads,
        sum_pi_squared=sum_pi_squared,
        **kwargs,
    )

    def actions(x: Tensor) -> Tensor:
        x = x[:, :-1]
        return packed.unpack_shifted(x) if packed is not None else x

    return _mapped(scores, actions)


def causal_lm_log_probs(
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    *,
    temperature: float = 1.0,
    position_ids: Tensor | None = None,
    packing: bool = False,
) -> Tensor:
    """The ``[B, T-1]`` log-probs of :func:`causal_lm_scores`, alone."""
    return causal_lm_scores(
        model, input_ids, attention_mask, temperature=temperature, position_ids=position_ids, packing=packing
    ).log_probs


def _mapped(scores: TokenScores, fn) -> TokenScores:  # noqa: ANN001 - Tensor -> Tensor
    sq = scores.sum_pi_squared
    return TokenScores(fn(scores.log_probs), tuple(fn(e) for e in scores.entropies), None if sq is None else fn(sq))


def _one_row(input_ids: Tensor, attention_mask: Tensor | None) -> PackedBatch:
    """The batch as one packed row (what sequence parallelism splits), or a ValueError naming why it cannot be."""
    packed = pack(input_ids, attention_mask, varlen=True) if attention_mask is not None else None
    if packed is None:
        raise ValueError(
            "sequence parallelism splits packed rows: this batch has no attention mask, no real token, or a row whose "
            "tokens are not one contiguous span (left or right padding only)"
        )
    return packed


def _shard(split: Splitting, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor | None):
    """(this rank's shard, the packing to undo or None for rows packed beforehand)."""
    if position_ids is not None:  # rows packed beforehand (data.packing): split as they are
        rows, width = input_ids.shape
        every = torch.ones(rows, width - 1, dtype=torch.bool, device=input_ids.device)
        return shard_rows(input_ids, position_ids, every, size=split.size, rank=split.rank), None
    packed = _one_row(input_ids, attention_mask)
    return shard_packed(packed, size=split.size, rank=split.rank), packed


def _split_scores(
    split: Splitting,
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    temperature: float,
    entropy_temperatures: tuple[float, ...],
    entropy_grads: tuple[bool, ...] | None,
    sum_pi_squared: bool,
) -> TokenScores:
    """:func:`causal_lm_scores` with the rows split over the SP group (see the module docstring)."""
    shard, packed = _shard(split, input_ids, attention_mask, position_ids)
    split.enter(model, shard)
    scores = token_scores(
        model,
        shard.input_ids,
        shard.targets,
        temperature=temperature,
        entropy_temperatures=entropy_temperatures,
        entropy_grads=entropy_grads,
        sum_pi_squared=sum_pi_squared,
        position_ids=shard.local_position_ids,
    )

    def actions(x: Tensor) -> Tensor:
        x = _gathered_actions(shard, x, split)
        return packed.unpack_shifted(x) if packed is not None else x

    return _mapped(scores, actions)


def _gathered_actions(shard: SequenceShard, local: Tensor, split: Splitting) -> Tensor:
    return shard.gather_actions(local, split.group, for_loss=torch.is_grad_enabled())


def value_model_token_values(model, input_ids: Tensor, attention_mask: Tensor, *, packing: bool = False) -> Tensor:
    """``[B, T]`` value-head outputs (the value of the state after each token), packed when asked and possible."""
    split = active()
    if split is not None:
        shard, packed = _shard(split, input_ids, attention_mask, None)
        split.enter(model, shard)
        local = model(input_ids=shard.input_ids, position_ids=shard.local_position_ids)
        return packed.unpack(shard.gather_tokens(local, split.group, for_loss=torch.is_grad_enabled()))
    packed: PackedBatch | None = pack_for(model, input_ids, attention_mask) if packing else None
    if packed is None:
        return model(input_ids=input_ids, attention_mask=attention_mask)
    return packed.unpack(model(input_ids=packed.input_ids, position_ids=packed.position_ids))


def value_model_values(model, input_ids: Tensor, attention_mask: Tensor, *, packing: bool = False) -> Tensor:
    """Critic values ``[B, T-1]``: the value of the state before each token 1..T-1 (action-aligned)."""
    return value_model_token_values(model, input_ids, attention_mask, packing=packing)[:, :-1]


def value_model_rewards(
    model, input_ids: Tensor, attention_mask: Tensor, *, normalized: bool = True, packing: bool = False
) -> Tensor:
    """``[B]`` reward at each sequence's last non-pad token; normalised with the model's stored mean/std when the
    model was loaded with ``normalize_reward`` and is in eval mode (OpenRLHF's behaviour)."""
    unwrapped = getattr(model, "module", model)
    values = value_model_token_values(model, input_ids, attention_mask, packing=packing)
    rewards = sequence_rewards(values, attention_mask)
    if normalized and not unwrapped.training:
        rewards = normalize(rewards, _base(unwrapped))
    return rewards


def forward_tokens(model, attention_mask: Tensor, *, packing: bool) -> dict[str, float]:
    """``{"tokens_real", "tokens_computed"}`` of one forward over a batch with this mask, in the layout the forwards
    above use: what the padding fraction and the tokens per second are made of."""
    real = int(attention_mask.sum())
    computed = int(attention_mask.numel())
    split = active()
    if split is not None:  # one row, padded to a multiple of the SP size
        return {"tokens_real": float(real), "tokens_computed": float(real + -real % split.size)}
    kind = attention_kind(model) if packing else None
    if kind is not None:
        rows, width = plan_rows(attention_mask.sum(dim=1).tolist(), kind in VARLEN_ATTENTION)
        computed = len(rows) * width
    return {"tokens_real": float(real), "tokens_computed": float(computed)}


def _base(model):
    # peft wraps the value model; the mean/std buffers and config live on the wrapped model.
    get_base = getattr(model, "get_base_model", None)
    return get_base() if get_base is not None else model
