"""Forward passes shared by every engine: per-token log-probs of a causal LM, values and rewards of a value model.

Action-aligned outputs are ``[B, T-1]``: entry t scores token t+1 given tokens 0..t (OpenRLHF's convention).

``packing=True`` runs the batch as packed rows (rlhf.models.packing: position ids restarting per sample, the
boundaries kept by transformers' packed-sequence masks) and returns the outputs in the padded layout, so callers and
losses never see the difference; where the model's attention cannot take packed rows the padded batch runs. Rows
that arrive already packed (``data.packing``: several SFT samples per row) pass their ``position_ids``.
"""

from __future__ import annotations

from torch import Tensor

from rlhf.algo import entropy_from_logits, log_probs_from_logits
from rlhf.models.packing import VARLEN_ATTENTION, PackedBatch, attention_kind, pack_for, plan_rows
from rlhf.models.value_head import normalize, position_ids_from_mask, sequence_rewards


def causal_lm_log_probs(
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    position_ids: Tensor | None = None,
    packing: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """``log π(x_{t+1} | x_{≤t})`` for t = 0..T-2, shape ``[B, T-1]`` (and the entropy of each step's distribution
    over the untempered logits when ``return_entropy``). Positions come from a 2-D mask, so left padding is fine;
    rows packed beforehand pass their ``position_ids`` (the mask is then ignored: the samples are found from the
    positions). ``packing``: see the module docstring (0 at padding positions)."""
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
    logits = model(input_ids=ids, use_cache=False, **kwargs).logits[:, :-1]
    logps = log_probs_from_logits(logits, ids[:, 1:], temperature)
    entropy = entropy_from_logits(logits) if return_entropy else None
    if packed is not None:
        logps = packed.unpack_shifted(logps)
        entropy = packed.unpack_shifted(entropy) if entropy is not None else None
    return (logps, entropy) if return_entropy else logps


def value_model_token_values(model, input_ids: Tensor, attention_mask: Tensor, *, packing: bool = False) -> Tensor:
    """``[B, T]`` value-head outputs (the value of the state after each token), packed when asked and possible."""
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
    kind = attention_kind(model) if packing else None
    if kind is not None:
        rows, width = plan_rows(attention_mask.sum(dim=1).tolist(), kind in VARLEN_ATTENTION)
        computed = len(rows) * width
    return {"tokens_real": float(real), "tokens_computed": float(computed)}


def _base(model):
    # peft wraps the value model; the mean/std buffers and config live on the wrapped model.
    get_base = getattr(model, "get_base_model", None)
    return get_base() if get_base is not None else model
