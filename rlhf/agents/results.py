"""Checking what agent code returns, and converting OpenRLHF's episode dicts to and from :class:`Rollout`.

``step()`` must return a dict with (OpenRLHF's protocol):
    rewards               float, int, bool or a one-element tensor/array: this step's reward (summed per episode)
    environment_feedback  str: text appended after the action (tokenised without special tokens, masked out of
                          the loss); "" for none
    done                  bool: whether the episode ends
    scores                optional scalar: the episode's score for filtering/logging (the last step's counts;
                          default: the running reward sum)
    sampling_params       optional: the next turn's sampling settings (see rlhf.agents.sampling)
    extra_logs            optional dict of scalars, logged per sample (later steps override earlier keys)

An executor's ``execute()`` returns OpenRLHF's episode dict: ``observation_tokens`` (prompt + actions + feedback),
``action_ranges`` ([start, end) of each generation within ``observation_tokens``), ``rollout_log_probs`` (aligned
to ``observation_tokens``, 0.0 outside actions, or None), ``truncated``, ``reward``, ``scores``, ``extra_logs``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlhf.agents.errors import AgentProblem
from rlhf.agents.sampling import SamplingParams, coerce_sampling_params
from rlhf.backends.contract.rollout import Rollout

REQUIRED_STEP_KEYS = ("rewards", "environment_feedback", "done")


def to_scalar(value: Any, what: str) -> float:
    """``value`` as a float: Python/numpy numbers, bools and one-element tensors (OpenRLHF calls ``.item()``)."""
    if isinstance(value, (bool, numbers.Real)):
        return float(value)
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    item = getattr(value, "item", None)
    if item is not None:
        n = numel() if callable(numel) else numel
        if n == 1:
            return float(item())
        raise AgentProblem(f"{what} must be a single number; got a {type(value).__name__} with {n} elements")
    raise AgentProblem(f"{what} must be a number or a one-element tensor; got {type(value).__name__}: {value!r:.80}")


def to_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    if getattr(value, "item", None) is not None and getattr(value, "dtype", None) is not None:
        try:
            return to_bool(value.item(), what)
        except (ValueError, RuntimeError):
            pass
    raise AgentProblem(f"{what} must be a bool; got {type(value).__name__}: {value!r:.80}")


def scalar_logs(logs: Any, what: str) -> dict[str, float]:
    if logs is None:
        return {}
    if not isinstance(logs, Mapping):
        raise AgentProblem(f"{what} must be a dict of numbers; got {type(logs).__name__}")
    return {str(k): to_scalar(v, f"{what}[{k!r}]") for k, v in logs.items()}


@dataclass
class StepResult:
    reward: float
    scores: float | None
    feedback: str
    done: bool
    sampling: SamplingParams
    extra_logs: dict[str, float] = field(default_factory=dict)


def check_step_result(result: Any, current: SamplingParams) -> StepResult:
    """The validated ``step()`` return value; :class:`AgentProblem` saying what is wrong otherwise."""
    if not isinstance(result, Mapping):
        raise AgentProblem(
            f"step() must return a dict with keys {list(REQUIRED_STEP_KEYS)}; got {type(result).__name__}"
        )
    missing = [k for k in REQUIRED_STEP_KEYS if k not in result]
    if missing:
        raise AgentProblem(f"step() returned a dict without {missing} (it has {sorted(map(str, result))})")
    feedback = result["environment_feedback"]
    if feedback is None:
        feedback = ""
    if not isinstance(feedback, str):
        raise AgentProblem(f"step()['environment_feedback'] must be a str; got {type(feedback).__name__}")
    scores = result.get("scores")
    return StepResult(
        reward=to_scalar(result["rewards"], "step()['rewards']"),
        scores=None if scores is None else to_scalar(scores, "step()['scores']"),
        feedback=feedback,
        done=to_bool(result["done"], "step()['done']"),
        sampling=coerce_sampling_params(result.get("sampling_params"), current),
        extra_logs=scalar_logs(result.get("extra_logs"), "step()['extra_logs']"),
    )


def rollout_from_result(result: Any) -> Rollout:
    """An OpenRLHF episode dict (``execute()``'s return value) as a :class:`Rollout`.

    The prompt is everything before the first action range; output_ids everything after, with action_mask 1 inside
    the action ranges.
    """
    if not isinstance(result, Mapping):
        raise AgentProblem(f"execute() must return a dict; got {type(result).__name__}")
    for key in ("observation_tokens", "action_ranges"):
        if key not in result:
            raise AgentProblem(f"execute() returned a dict without {key!r} (it has {sorted(map(str, result))})")
    tokens = [int(t) for t in result["observation_tokens"]]
    ranges = [(int(s), int(e)) for s, e in result["action_ranges"]]
    start = ranges[0][0] if ranges else len(tokens)
    prev = start
    for s, e in ranges:
        if not prev <= s <= e <= len(tokens):
            raise AgentProblem(
                f"execute() returned action_ranges {ranges} that are not ordered, disjoint spans of the "
                f"{len(tokens)} observation_tokens"
            )
        prev = e
    mask = [0] * len(tokens)
    for s, e in ranges:
        mask[s:e] = [1] * (e - s)
    logprobs = result.get("rollout_log_probs")
    if logprobs is None:
        logprobs = [0.0] * len(tokens)
    if len(logprobs) != len(tokens):
        raise AgentProblem(f"execute() returned {len(logprobs)} rollout_log_probs for {len(tokens)} observation_tokens")
    logprobs = [float(lp) if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)]
    reward = result.get("reward")
    scores = result.get("scores")
    extra = {"extra_logs": scalar_logs(result.get("extra_logs"), "execute()['extra_logs']"), "turns": len(ranges)}
    return Rollout(
        prompt_ids=tokens[:start],
        output_ids=tokens[start:],
        action_mask=mask[start:],
        logprobs=logprobs[start:],
        finish_reason="length" if result.get("truncated") else "stop",
        reward=None if reward is None else to_scalar(reward, "reward"),
        scores=None if scores is None else to_scalar(scores, "scores"),
        extra=extra,
    )


def result_from_rollout(rollout: Rollout, prompt: str, label: Any) -> dict[str, Any]:
    """The inverse of :func:`rollout_from_result`: OpenRLHF's episode dict for ``rollout``."""
    tokens = rollout.prompt_ids + rollout.output_ids
    offset = len(rollout.prompt_ids)
    ranges: list[tuple[int, int]] = []
    for i, m in enumerate(rollout.action_mask):
        if m and (not ranges or ranges[-1][1] != offset + i):
            ranges.append((offset + i, offset + i + 1))
        elif m:
            ranges[-1] = (ranges[-1][0], offset + i + 1)
    return {
        "prompt": prompt,
        "label": label,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": [0.0] * offset + list(rollout.logprobs),
        "truncated": rollout.finish_reason == "length",
        "reward": rollout.reward,
        "scores": rollout.scores,
        "extra_logs": dict(rollout.extra.get("extra_logs", {})),
    }
