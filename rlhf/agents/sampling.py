"""The sampling settings agent code sees: vLLM's ``SamplingParams`` field names, mutable.

OpenRLHF hands agent code a vLLM ``SamplingParams`` (``states["sampling_params"]``, the ``sampling_params``
argument of ``AgentExecutor.execute``) and accepts one back from ``step()``. :class:`SamplingParams` keeps those names
(``max_tokens``, ``logprobs``, ...) so such code runs unchanged, and converts to and from the engines'
:class:`~rlhf.backends.contract.rollout.SamplingSpec`. ``step()`` may also return a ``SamplingSpec``, a dict of either
naming, or any object with vLLM's attribute names (a real ``vllm.SamplingParams``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rlhf.agents.errors import AgentProblem
from rlhf.backends.contract.rollout import SamplingSpec

# vLLM name -> SamplingSpec name, where they differ.
_RENAMES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}


@dataclass
class SamplingParams:
    """vLLM-named sampling settings for one generate call (``max_tokens=None``: the rest of the length budget)."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_tokens: int = 0
    n: int = 1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    logprobs: int | None = 1  # None: the engine need not report log-probs
    skip_special_tokens: bool = False  # how action_text is decoded (OpenRLHF sets False)

    @classmethod
    def from_spec(cls, spec: SamplingSpec) -> SamplingParams:
        return cls(
            max_tokens=spec.max_new_tokens,
            temperature=spec.temperature,
            top_p=spec.top_p,
            top_k=spec.top_k,
            min_tokens=spec.min_new_tokens,
            n=spec.n,
            stop=list(spec.stop),
            stop_token_ids=list(spec.stop_token_ids),
            seed=spec.seed,
            logprobs=1 if spec.logprobs else None,
        )

    def to_spec(self, max_new_tokens: int) -> SamplingSpec:
        """The engine's settings for one sample of at most ``max_new_tokens`` tokens."""
        return SamplingSpec(
            max_new_tokens=max_new_tokens,
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            top_k=int(self.top_k),
            n=1,
            stop=tuple(self.stop or ()),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            min_new_tokens=int(self.min_tokens or 0),
            seed=self.seed,
            logprobs=self.logprobs is not None,
        )

    def clone(self) -> SamplingParams:
        return dataclasses.replace(self, stop=list(self.stop), stop_token_ids=list(self.stop_token_ids))


_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


def coerce_sampling_params(value: Any, current: SamplingParams) -> SamplingParams:
    """What ``step()`` returned under ``"sampling_params"`` as :class:`SamplingParams` (``current`` when None)."""
    if value is None:
        return current
    if isinstance(value, SamplingParams):
        return value
    if isinstance(value, SamplingSpec):
        out = SamplingParams.from_spec(value)
        out.n = 1
        return out
    if isinstance(value, dict):
        updates = dict(value)
    elif hasattr(value, "max_tokens") and hasattr(value, "temperature"):  # vllm.SamplingParams or a look-alike
        updates = {name: getattr(value, name) for name in _FIELDS if hasattr(value, name)}
    else:
        raise AgentProblem(
            f"step() returned sampling_params of type {type(value).__name__}; return None, the sampling_params it "
            "was given (states['sampling_params']), a dict, or a SamplingSpec"
        )
    inverse = {v: k for k, v in _RENAMES.items()}
    updates = {inverse.get(k, k): v for k, v in updates.items()}
    unknown = sorted(set(updates) - _FIELDS)
    if unknown:
        raise AgentProblem(f"step() returned sampling_params with unknown fields {unknown}; known: {sorted(_FIELDS)}")
    if updates.get("logprobs") is True:
        updates["logprobs"] = 1
    if updates.get("logprobs") is False:
        updates["logprobs"] = None
    for key in ("stop", "stop_token_ids"):
        if updates.get(key) is None and key in updates:
            updates[key] = []
        elif isinstance(updates.get(key), (str, int)):
            updates[key] = [updates[key]]
    return dataclasses.replace(current.clone(), **updates)
