"""OpenRLHF's contract: ``reward_func(queries, prompts, labels, **kwargs)`` once per batch, positionally, returning
the rewards or ``{"rewards", "scores", "extra_logs"}``. The names below are read by the loader and by the static
check before start-up (rlhf.planning.preflight.python_files), so both name the same function, arguments and fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlhf.rewards.batch import RewardBatch
from rlhf.rewards.contracts.base import CallOptions, Scores
from rlhf.rewards.contracts.signature import Params
from rlhf.rewards.result import coerce_result

FUNCTION_NAME = "reward_func"
#: The positional arguments it is called with, in this order.
POSITIONAL_ARGS = ("queries", "prompts", "labels")
#: Keywords passed only when the function takes them (by name or through ``**kwargs``).
OPTIONAL_KEYWORDS = ("responses",)
#: How a user writes it, and what it returns (the fix in the messages).
DEFINITION = f"def {FUNCTION_NAME}({', '.join(POSITIONAL_ARGS)}, **kwargs)"
RETURNS = 'a list/tensor of rewards or {"rewards": ..., "scores": ..., "extra_logs": {...}}'

ARGS, OPTIONAL = POSITIONAL_ARGS, OPTIONAL_KEYWORDS


class OpenRLHFContract:
    name = "openrlhf"
    definition = DEFINITION
    markers = frozenset({"queries", "labels", "responses"})

    def binds(self, params: Params) -> str | None:
        if len(params.positional) < len(ARGS) and not params.var_positional:
            return f"it takes {len(params.positional)} positional arguments, OpenRLHF passes {len(ARGS)}"
        required_pos = [p for p in params.positional[len(ARGS) :] if p in params.required and p not in OPTIONAL]
        if required_pos:
            return f"it requires {', '.join(required_pos)} beyond OpenRLHF's {', '.join(ARGS)}"
        required_kw = [k for k in params.keyword_only if k in params.required and k not in OPTIONAL]
        if required_kw:
            return f"it requires keyword {', '.join(required_kw)}, which OpenRLHF does not pass"
        return None

    def invoke(self, fn: Callable[..., Any], batch: RewardBatch, options: CallOptions) -> Any:
        params = Params.of(fn)
        takes_responses = params is not None and any(params.by_keyword(k) for k in OPTIONAL)
        kwargs = {"responses": list(batch.responses)} if takes_responses else {}
        return fn(list(batch.queries), list(batch.prompts), list(batch.labels), **kwargs)

    def read(self, out: Any, n: int, origin: str) -> Scores:
        r = coerce_result(out, n, origin)
        return Scores(r.rewards, r.scores, r.extra_logs)
