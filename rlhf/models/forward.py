"""Forward passes shared by every engine: per-token log-probs of a causal LM, values and rewards of a value model.

Action-aligned outputs are ``[B, T-1]``: entry t scores token t+1 given tokens 0..t (OpenRLHF's convention).
"""

from __future__ import annotations

from torch import Tensor

from rlhf.algo import entropy_from_logits, log_probs_from_logits
from rlhf.models.value_head import normalize, position_ids_from_mask, sequence_rewards


def causal_lm_log_probs(
    model,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    position_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``log π(x_{t+1} | x_{≤t})`` for t = 0..T-2, shape ``[B, T-1]`` (and the entropy of each step's distribution
    over the untempered logits when ``return_entropy``). Positions come from a 2-D mask, so left padding is fine;
    packed rows pass their ``position_ids`` and a 4-D block-causal mask."""
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    logits = out.logits[:, :-1]
    logps = log_probs_from_logits(logits, input_ids[:, 1:], temperature)
    if return_entropy:
        return logps, entropy_from_logits(logits)
    return logps


def value_model_values(model, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Critic values ``[B, T-1]``: the value of the state before each token 1..T-1 (action-aligned)."""
    return model(input_ids=input_ids, attention_mask=attention_mask)[:, :-1]


def value_model_rewards(model, input_ids: Tensor, attention_mask: Tensor, *, normalized: bool = True) -> Tensor:
    """``[B]`` reward at each sequence's last non-pad token; normalised with the model's stored mean/std when the
    model was loaded with ``normalize_reward`` and is in eval mode (OpenRLHF's behaviour)."""
    unwrapped = getattr(model, "module", model)
    rewards = sequence_rewards(model(input_ids=input_ids, attention_mask=attention_mask), attention_mask)
    if normalized and not unwrapped.training:
        rewards = normalize(rewards, _base(unwrapped))
    return rewards


def _base(model):
    # peft wraps the value model; the mean/std buffers and config live on the wrapped model.
    get_base = getattr(model, "get_base_model", None)
    return get_base() if get_base is not None else model
