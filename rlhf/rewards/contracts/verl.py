"""veRL's contract (NaiveRewardManager, verl 0.9.1): once per sample, by keyword,

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)

returning a number, or a dict whose ``score`` is the reward and whose other numbers are logged. ``solution_str`` is
the response decoded without special tokens, ``data_source`` the row's source (data.datasource_key),
``ground_truth`` its label, ``extra_info`` its ``extra_info`` column (a dict; veRL adds ``num_turns`` and
``rollout_reward_scores``).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import math
from collections.abc import Callable
from typing import Any

from rlhf.rewards.batch import RewardBatch
from rlhf.rewards.contracts.base import CallOptions, Scores
from rlhf.rewards.contracts.signature import Params
from rlhf.rewards.result import RewardError

KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")


def sample_arguments(batch: RewardBatch, i: int) -> dict[str, Any]:
    row = batch.rows[i]
    cols = row.get("columns") or {}
    source = cols.get("data_source", row.get("datasource", "default"))
    extra = cols.get("extra_info")
    extra = copy.deepcopy(extra) if isinstance(extra, dict) else {}  # veRL's functions may write into it
    extra.setdefault("num_turns", None)
    extra.setdefault("rollout_reward_scores", {})
    return {
        "data_source": source,
        "solution_str": batch.completions[i],
        "ground_truth": batch.labels[i],
        "extra_info": extra,
    }


async def _gather(values: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*(v if inspect.isawaitable(v) else _done(v) for v in values)))


async def _done(value: Any) -> Any:
    return value


class VerlContract:
    name = "verl"
    definition = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
    markers = frozenset({"data_source", "solution_str", "ground_truth", "extra_info"})

    def binds(self, params: Params) -> str | None:
        unknown = sorted(params.required - set(KEYWORDS))
        if unknown:
            return f"it requires {', '.join(unknown)}, which veRL does not pass"
        refused = [k for k in KEYWORDS if not params.by_keyword(k)]
        if refused:
            return f"it takes no {', '.join(refused)}, which veRL passes by keyword"
        return None

    def invoke(self, fn: Callable[..., Any], batch: RewardBatch, options: CallOptions) -> Any:
        out = [fn(**sample_arguments(batch, i)) for i in range(len(batch))]
        return _gather(out) if any(inspect.isawaitable(v) for v in out) else out

    def read(self, out: Any, n: int, origin: str) -> Scores:
        values: list[float] = []
        logs: dict[str, list[float]] = {}
        for i, item in enumerate(out):
            score = item
            if isinstance(item, dict):
                if "score" not in item:
                    raise RewardError(f"{origin}: sample {i} returned a dict with keys {sorted(item)} but no 'score'")
                score = item["score"]
                for k, v in item.items():
                    if k != "score" and isinstance(v, (int, float)):
                        logs.setdefault(str(k), [math.nan] * n)[i] = float(v)
            if hasattr(score, "item") and not isinstance(score, (str, bytes)):
                score = score.item()  # a numpy or torch scalar
            if not isinstance(score, (int, float)) or not math.isfinite(score):
                raise RewardError(f"{origin}: sample {i} scored {score!r}; compute_score returns a finite number")
            values.append(float(score))
        return Scores(values, None, logs)
