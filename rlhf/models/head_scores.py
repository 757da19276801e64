"""A causal LM's log-probs, entropies and ``Σπ²`` of the next tokens without the whole micro-batch's logits.

The model runs its own forward, but its output head (``lm_head``) computes, in place of the ``[tokens, vocab]``
logits, each token's log-prob of its target and the entropy, chunk by chunk
(rlhf.algo.logprobs.token_scores_from_hidden: the backward recomputes each chunk's logits). The head is swapped for
the one call only, so the engines' machinery around the module keeps working as for any forward: ZeRO-3 gathers the
head's weight before it and again before its backward, FSDP2 unshards and reduce-scatters it, autograd reaches it.

The head's output must be the model's output: a model that changes its logits after the head (Gemma's soft-capping,
Cohere's logit scale, Granite's divisor, ...) would change the scores instead. So the scores are checked to come
back unchanged; where they do not, that call runs again with the whole logits (the model's class is remembered, and
later calls go straight to the whole logits). A head that is not a plain ``nn.Linear`` (a LoRA-wrapped head) takes
the whole logits too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rlhf.algo.logprobs import (
    TokenScores,
    entropy_from_logits,
    log_probs_from_logits,
    sum_pi_squared_from_logits,
    token_scores_from_hidden,
)
from rlhf.models.packing import base_model

log = logging.getLogger(__name__)

#: Model classes seen to change the head's output (their scores come from the whole logits).
_WHOLE_LOGITS: set[type] = set()


@dataclass
class _Returned:
    scores: Tensor | None = None  # a copy of what the head returned


@contextmanager
def _scoring_head(
    head: nn.Linear,
    targets: Tensor,
    temperature: float,
    entropy_temperatures: tuple[float, ...],
    entropy_grads: tuple[bool, ...] | None,
    sum_sq: bool,
) -> Iterator[_Returned]:
    """``head`` returns ``[..., k]`` (log-prob of ``targets``, then ``Σπ²`` if asked, then each entropy) inside; its
    own forward after."""
    returned = _Returned()
    own = head.__dict__.get("forward")  # an instance-level forward someone set (else the class's)

    def forward(hidden: Tensor) -> Tensor:
        out = token_scores_from_hidden(
            hidden,
            head.weight,
            head.bias,
            targets,
            temperature=temperature,
            entropy_temperatures=entropy_temperatures,
            entropy_grads=entropy_grads,
            sum_pi_squared=sum_sq,
        )
        parts = [out.log_probs, *([out.sum_pi_squared] if sum_sq else []), *out.entropies]
        scores = torch.stack(parts, dim=-1)  # a new tensor, not a view
        returned.scores = scores.detach().clone()
        return scores

    head.forward = forward
    try:
        yield returned
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own


def _split(scores: Tensor, sum_sq: bool, entropy_grads: tuple[bool, ...] | None) -> TokenScores:
    """The ``[..., k]`` scores the head returned as :class:`TokenScores` (a logged-only entropy, like ``Σπ²``, has
    no gradient: its slice is detached)."""
    rest = 2 if sum_sq else 1
    grads = entropy_grads if entropy_grads is not None else (True,) * (scores.shape[-1] - rest)
    return TokenScores(
        scores[..., 0],
        tuple(scores[..., i] if g else scores[..., i].detach() for i, g in enumerate(grads, start=rest)),
        scores[..., 1].detach() if sum_sq else None,
    )


def _unchanged(got: Tensor, returned: Tensor | None) -> bool:
    if returned is None or got.shape != returned.shape:
        return False
    got = got.detach()
    return bool(((got == returned) | (got.isnan() & returned.isnan())).all())


def output_head(model: Any) -> nn.Linear | None:
    """The plain linear output head the scores can be computed in, or None (whole logits)."""
    hf = base_model(model)
    if type(hf) in _WHOLE_LOGITS:
        return None
    get = getattr(hf, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, nn.Linear) else None


def token_scores(
    model: Any,
    input_ids: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    entropy_temperatures: tuple[float, ...] = (),
    entropy_grads: tuple[bool, ...] | None = None,
    sum_pi_squared: bool = False,
    **kwargs: Any,
) -> TokenScores:
    """``model(input_ids=..., use_cache=False, **kwargs)``'s log-prob of ``targets`` at every position ``[R, W]``
    (``targets[:, j]``: the token after position j; what a position without one predicts does not matter) at
    ``temperature``, the entropy at each of ``entropy_temperatures`` and (``sum_pi_squared``) ``Σπ²`` at
    ``temperature`` (``entropy_grads``: which entropies a loss differentiates, None: all; the others are logged only,
    without a gradient). No position's logits over the vocabulary exist at once beyond
    rlhf.algo.logprobs.LOGIT_CHUNK_TOKENS of them, in the forward or the backward (see the module docstring for the
    models that keep the whole logits)."""
    temps = tuple(entropy_temperatures)
    head = output_head(model)
    if head is not None:
        with _scoring_head(head, targets, temperature, temps, entropy_grads, sum_pi_squared) as returned:
            scores = model(input_ids=input_ids, use_cache=False, **kwargs).logits
        if _unchanged(scores, returned.scores):
            return _split(scores, sum_pi_squared, entropy_grads)
        hf = type(base_model(model))
        _WHOLE_LOGITS.add(hf)
        log.warning("%s changes its logits after the output head: its log-probs use the whole logits", hf.__name__)
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits
    sq = None
    if sum_pi_squared:
        with torch.no_grad():
            sq = sum_pi_squared_from_logits(logits, temperature)
    grads = entropy_grads if entropy_grads is not None else (True,) * len(temps)
    entropies = []
    for t, grad in zip(temps, grads, strict=True):
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):  # a logged entropy keeps no graph
            entropies.append(entropy_from_logits(logits, t))
    return TokenScores(log_probs_from_logits(logits, targets, temperature), tuple(entropies), sq)
