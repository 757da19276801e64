"""The benchmark's reward, one scoring rule behind both systems' reward-function protocols.

    rlhf:  reward.function=bench/reward.py      -> reward_func(queries, prompts, labels, **kwargs)
    TRL:   GRPOTrainer(reward_funcs=trl_reward) -> trl_reward(prompts, completions, label, **kwargs)

Score of one response (text after the prompt; special tokens and whitespace stripped at the ends):
    1.0 if it starts with the label, plus 0.1 * the fraction of its characters that are digits.
The second term keeps the reward varied within a group for an untrained model, so advantages are not all zero
and both trainers do the same work every step. It costs microseconds: the benchmark measures the trainers.
"""

from __future__ import annotations

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
