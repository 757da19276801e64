"""The benchmark's reward, one scoring rule behind both systems' reward-function protocols.

    rlhf:  reward.function=bench/reward.py      -> reward_func(queries, prompts, labels, **kwargs)
    TRL:   GRPOTrainer(reward_funcs=trl_reward) -> trl_reward(prompts, completions, label, **kwargs)

Score of one response (text after the prompt; special tokens and whitespace stripped at the ends):
    1.0 if it starts with the label, plus 0.1 * the fraction of its characters that are digits.
The second term keeps the reward varied within a group for an untrained model, so advantages are not all zero
and both trainers do the same work every step. It costs microseconds: the benchmark measures the trainers.

bench/learning_vs_trl.py instead scores with rlhf's own ``reward.verifier=exact`` (``rlhf.rewards.verifiers``):
rlhf calls it itself, and TRL gets :class:`TRLExactReward`, which feeds it the same text rlhf's Scorer would.
"""

from __future__ import annotations

from typing import Any

_SPECIAL = ("<|im_end|>", "<|endoftext|>", "</s>", "<eos>", "<pad>")


def score(response: str, label: str) -> float:
    text = response
    for s in _SPECIAL:
        text = text.replace(s, "")
    text = text.strip()
    digits = sum(c.isdigit() for c in text) / max(len(text), 1)
    return (1.0 if label and text.startswith(str(label)) else 0.0) + 0.1 * digits


def reward_func(queries: list[str], prompts: list[str], labels: list[str], **kwargs) -> list[float]:
    """rlhf (OpenRLHF protocol): queries are prompt + response texts."""
    responses = kwargs.get("responses")
    if responses is None:
        responses = [q[len(p) :] if q.startswith(p) else q for q, p in zip(queries, prompts, strict=True)]
    return [score(r, str(lab)) for r, lab in zip(responses, labels, strict=True)]


def trl_reward(prompts, completions, label, **kwargs) -> list[float]:
    """TRL: completions are message lists (conversational data) or strings; ``label`` is the dataset column."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [score(t, str(lab)) for t, lab in zip(texts, label, strict=True)]


def exact_outcomes(responses: list[str], labels: list[str]) -> tuple[list[float], list[float]]:
    """(rewards, scores) of rlhf's exact verifier, the function ``reward.verifier=exact`` runs: reward 1 for the
    label (whole response or first token), 0.1 for a wrong number, else 0; score = strict correctness (0/1)."""
    from rlhf.rewards.verifiers import verify

    res = verify("exact", responses, responses, responses, [str(lab) for lab in labels])
    return list(res.rewards), list(res.scores)


class TRLExactReward:
    """TRL reward function with the semantics of rlhf's ``reward.verifier=exact``.

    TRL hands reward functions completions decoded with ``skip_special_tokens=True``; rlhf's Scorer decodes the
    output ids with them kept (its verifier strips trailing ones). The two could differ for a sample whose special
    token comes first ("<|end|>7"), so this decodes ``completion_ids`` as rlhf does. Every call's rewards and
    scores are kept (one call per GRPO step when a step generates once), for the per-step training curve."""

    __name__ = "exact"  # TRL names the reward's metrics after it

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls: list[tuple[list[float], list[float]]] = []

    def __call__(
        self, prompts: list, completions: list, completion_ids: list[list[int]], label: list, **kw: Any
    ) -> list[float]:
        responses = [self.tokenizer.decode(ids, skip_special_tokens=False) for ids in completion_ids]
        rewards, scores = exact_outcomes(responses, label)
        self.calls.append((rewards, scores))
        return rewards
