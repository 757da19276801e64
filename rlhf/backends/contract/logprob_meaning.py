"""What the log-probs a rollout engine returns mean, in one place (every engine and the trainer keep to it).

For each sampled token y at a step with raw model logits z and sampling temperature τ, an engine reports

    log p(y) = z_y / τ − logsumexp(z / τ)        (over the whole vocabulary)

which is exactly what the trainer recomputes (``rlhf.algo.logprobs.log_probs_from_logits`` at
``rollout.temperature``; OpenRLHF's recomputation: temperature only). The sampling filters shape which token is
drawn but never the number reported:

- top-k / top-p: the token is drawn from the renormalised nucleus, its log-prob is taken over the full vocabulary.
  A token at the nucleus boundary therefore gets the same value whichever engine's filter let it through.
- min_new_tokens: eos and the stop token ids are masked until that many tokens exist; the mask is not in the
  reported log-prob (the trainer cannot see it either).
- greedy (τ = 0, or below vLLM's 1e-5): the untempered log-probs, τ taken as 1 (the trainer does the same).

Pure tensor functions; the vLLM logits processor (rlhf.backends.rollout.vllm.logprobs) applies them inside vLLM.
"""

from __future__ import annotations

import torch
from torch import Tensor

# vLLM's _SAMPLING_EPS: a request whose temperature is below it is sampled greedily, its logits not divided.
GREEDY_BELOW = 1e-5
# The SamplingParams.extra_args key carrying min_new_tokens to rlhf.backends.rollout.vllm.logprobs.TemperedLogprobs.
MIN_NEW_TOKENS_ARG = "rlhf_min_new_tokens"
# The SamplingParams.extra_args key naming the output tokens TemperedLogprobs forces (teacher forcing: the engine's
# own log-probs of given tokens, for the weight-sync probe).
FORCE_TOKENS_ARG = "rlhf_force_tokens"


def reporting_temperature(temperature: Tensor) -> Tensor:
    """The τ the reported log-probs are tempered with: the sampling temperature, or 1 where sampling is greedy."""
    return torch.where(temperature < GREEDY_BELOW, torch.ones_like(temperature), temperature)


def shift_to_tempered_logprobs_(logits: Tensor, temperature: Tensor) -> Tensor:
    """Shift each row of ``logits`` ``[B, V]`` in place by ``τ · logsumexp(row / τ)`` (``temperature`` ``[B]``).

    Afterwards ``row / τ`` is ``log_softmax(z / τ)``, so whatever a sampler reads off the tempered row for the
    sampled token is the log-prob above. The shift is one constant per row: softmax, argmax, top-k, top-p and
    min-p of the row, and so the token sampled, are unchanged (repetition penalties, which scale logits by sign,
    are not; the vLLM processor refuses them).
    """
    tau = reporting_temperature(temperature.to(logits.dtype)).unsqueeze(-1)
    return logits.sub_(tau * torch.logsumexp(logits / tau, dim=-1, keepdim=True))
