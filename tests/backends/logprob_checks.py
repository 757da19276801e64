"""References for the log-prob agreement tests of both engines (rlhf.backends.contract.logprob_meaning).

The trainer's side is its own code path (rollouts -> experience batch -> ``policy_logprobs_fn``); the sampling
filters are re-done here in fp32 from one full forward pass, to check what was sampled and to show that the
nucleus-renormalised log-probs (vLLM's ``processed_logprobs``) would be measurably different.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rlhf.backends.contract.rollout import Rollout
from rlhf.pipelines.experience import from_rollouts
from rlhf.pipelines.rl_losses import policy_logprobs_fn

# A token whose more likely neighbours hold within this much of top_p of the mass sits on the nucleus boundary:
# rounding decides whether an engine's filter keeps it, so the support check lets it through.
BOUNDARY_SLACK = 1e-4


@torch.no_grad()
def trainer_logprobs(model, rollouts: Sequence[Rollout], temperature: float, pad_id: int) -> list[Tensor]:
    """What the trainer recomputes for each rollout's generated tokens (right-padded batch, as in the RL loop)."""
    exp = from_rollouts(rollouts, pad_id)
    batch = {"sequences": exp.sequences, "attention_mask": exp.attention_mask}
    lp = policy_logprobs_fn(model, batch, temperature=temperature)
    mask = exp.action_mask.bool()
    return [lp[i][mask[i]] for i in range(len(rollouts))]


@torch.no_grad()
def step_logits(model, rollout: Rollout) -> Tensor:
    """``[n, V]`` fp32 logits that predicted each of the rollout's ``n`` generated tokens."""
    ids = torch.tensor([list(rollout.prompt_ids) + list(rollout.output_ids)])
    p = len(rollout.prompt_ids)
    return model(ids).logits[0, p - 1 : -1].float()


def _filtered_probs(logits: Tensor, temperature: float, top_k: int) -> Tensor:
    z = logits / temperature
    if top_k > 0:
        kth = z.topk(top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, -float("inf"))
    return z.softmax(-1)


def outside_filters(logits: Tensor, tokens: Sequence[int], temperature: float, top_k: int, top_p: float) -> list[int]:
    """Positions whose token neither top-k nor top-p (over the top-k, renormalised; vLLM's and transformers'
    convention) would keep, beyond ``BOUNDARY_SLACK`` of mass."""
    probs = _filtered_probs(logits, temperature, top_k)
    picked = probs.gather(-1, torch.tensor(list(tokens))[:, None])
    mass_above = (probs * (probs > picked)).sum(-1)
    out_k = picked[:, 0] == 0
    out_p = mass_above >= top_p + BOUNDARY_SLACK
    return torch.nonzero(out_k | out_p).flatten().tolist()


def renormalised_logprobs(
    logits: Tensor, tokens: Sequence[int], temperature: float, top_k: int, top_p: float
) -> Tensor:
    """The log-probs over the nucleus (what ``processed_logprobs`` reports): the meaning the engines do not use."""
    probs = _filtered_probs(logits, temperature, top_k)
    order = probs.sort(-1, descending=True)
    before = order.values.cumsum(-1) - order.values
    keep_sorted = before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order.indices, keep_sorted)
    z = (logits / temperature).masked_fill(~keep, -float("inf"))
    return z.log_softmax(-1).gather(-1, torch.tensor(list(tokens))[:, None])[:, 0]


def masked_stop_logprobs(logits: Tensor, tokens: Sequence[int], temperature: float, stop_ids: Sequence[int]) -> Tensor:
    """The log-probs had the min_new_tokens mask (stop ids at -inf) been put into the normaliser."""
    z = (logits / temperature).clone()
    z[:, list(stop_ids)] = -float("inf")
    return z.log_softmax(-1).gather(-1, torch.tensor(list(tokens))[:, None])[:, 0]


# The sampling the issue asks about: both filters active (top-p acts inside the top 20 as well).
FILTERS = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}


def check_filtered_sampling_reports_full_logprobs(engine, model, prompts, pad_id: int, atol: float) -> dict[str, float]:
    """Sampled with top-k/top-p, reported without them: every token inside the filters, every log-prob the trainer's
    recomputation within ``atol``, and the nucleus-renormalised alternative far outside it. Returns the figures."""
    from rlhf.backends.contract.rollout import SamplingSpec

    out = engine.generate(prompts, SamplingSpec(max_new_tokens=12, n=4, seed=2, **FILTERS))
    want = trainer_logprobs(model, out, FILTERS["temperature"], pad_id)
    worst, gap, tokens = 0.0, 0.0, 0
    for r, w in zip(out, want, strict=True):
        logits = step_logits(model, r)
        assert outside_filters(logits, r.output_ids, **FILTERS) == [], r.output_ids
        worst = max(worst, float((torch.tensor(r.logprobs) - w).abs().max()))
        gap = max(gap, float((renormalised_logprobs(logits, r.output_ids, **FILTERS) - w).abs().max()))
        tokens += len(r.output_ids)
    assert worst <= atol, worst
    assert gap > 100 * atol, gap
    return {"max_abs_diff": worst, "renormalised_gap": gap, "tokens": tokens}


def check_min_new_tokens_stays_out_of_logprobs(engine, model, prompt: list[int], eos_id: int, pad_id: int, atol: float):
    """The most likely first token made a stop token and held back for 4 tokens: never sampled there, and the
    reported log-probs are the unmasked model's (the masked normaliser would differ by well over ``atol``)."""
    from rlhf.backends.contract.rollout import SamplingSpec

    first = engine.generate([prompt], SamplingSpec(max_new_tokens=1, temperature=0.0))[0].output_ids[0]
    stops = (eos_id, first)
    held = 4
    spec = SamplingSpec(max_new_tokens=6, n=8, seed=4, stop_token_ids=(first,), min_new_tokens=held, **FILTERS)
    out = engine.generate([prompt], spec)
    want = trainer_logprobs(model, out, FILTERS["temperature"], pad_id)
    worst, gap = 0.0, 0.0
    for r, w in zip(out, want, strict=True):
        assert len(r.output_ids) >= held and not set(r.output_ids[:held]) & set(stops), r.output_ids
        worst = max(worst, float((torch.tensor(r.logprobs) - w).abs().max()))
        logits = step_logits(model, r)[:held]
        masked = masked_stop_logprobs(logits, r.output_ids[:held], FILTERS["temperature"], stops)
        gap = max(gap, float((masked - w[:held]).abs().max()))
    assert worst <= atol, worst
    assert gap > 10 * atol, gap
    return {"max_abs_diff": worst, "masked_gap": gap}
