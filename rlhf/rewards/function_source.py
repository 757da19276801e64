"""The reward source over ``reward.function``: one reference or a list (TRL's ``reward_funcs``), each loaded
(rlhf.rewards.loader), read in the contract its signature shows (rlhf.rewards.contracts), called once per batch
(async functions together), and combined with ``reward.weights`` (rlhf.rewards.combine).

A function that raises is told as its author fixes it, whatever its contract: the line in their file, the sample
that broke it (found by calling it on one sample at a time) and the full traceback (rlhf.rewards.failure).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from rlhf.rewards.batch import RewardBatch
from rlhf.rewards.combine import combine
from rlhf.rewards.contracts import CallOptions, Contract, NoContract, Params, Scores, choose
from rlhf.rewards.failure import Sample, describe, find_failing_sample
from rlhf.rewards.loader import Loaded, load
from rlhf.rewards.refs import parse_ref
from rlhf.rewards.result import RewardError, RewardResult
from rlhf.rewards.run_async import run_coroutine


class _Function:
    """One loaded function and the contract it is read in."""

    def __init__(self, loaded: Loaded, contract: Contract) -> None:
        self.loaded, self.contract = loaded, contract

    @property
    def origin(self) -> str:
        return f"reward function {self.loaded.path or self.loaded.ref.text}"

    def invoke(self, batch: RewardBatch, options: CallOptions) -> Any:
        try:
            return self.contract.invoke(self.loaded.fn, batch, options)
        except RewardError as e:  # the contract's own check (e.g. a column the function requires)
            if str(e).startswith("reward function"):
                raise
            raise RewardError(f"{self.origin} ({self.contract.name} contract) {e}") from None

    def alone(self, batch: RewardBatch, options: CallOptions, i: int) -> Any:
        out = self.invoke(batch.slice(i, i + 1), options)
        return run_coroutine(out) if inspect.isawaitable(out) else out

    def failure(self, error: Exception, batch: RewardBatch, options: CallOptions) -> RewardError:
        """The error for ``error``, raised on ``batch``: its line, the sample that broke it, its traceback."""
        search = find_failing_sample(lambda i: self.alone(batch, options, i), len(batch), error)
        samples = [Sample(p, r, lab) for p, r, lab in zip(batch.prompts, batch.responses, batch.labels, strict=False)]
        message, text = describe(self.loaded.path or self.loaded.ref.text, search, samples, error)
        return RewardError(message, traceback_text=text)


async def _gather(pending: dict[int, Any]) -> dict[int, Any]:
    keys = list(pending)
    done = await asyncio.gather(*(pending[k] for k in keys), return_exceptions=True)
    return dict(zip(keys, done, strict=True))


class FunctionReward:
    """A :class:`~rlhf.rewards.source.RewardSource` over one reward function reference or a list of them.

    ``contract``: reward.contract (``auto``: each function's own); ``weights``: one per function (empty: 1.0
    each); ``aggregation``: reward.multi_objective_aggregation; ``label_key``: the column the labels come from (TRL
    functions get them by that name when the data carries no columns)."""

    def __init__(
        self,
        path: str | Path | Sequence[str],
        contract: str = "auto",
        weights: Sequence[float] = (),
        aggregation: str = "sum_then_normalize",
        label_key: str | None = "label",
    ) -> None:
        refs = [str(path)] if isinstance(path, (str, Path)) else [str(p) for p in path]
        if not refs:
            raise RewardError("reward.function names no function")
        if weights and len(weights) != len(refs):
            raise RewardError(f"reward.weights has {len(weights)} values for {len(refs)} reward functions")
        self.path = refs[0] if len(refs) == 1 else ", ".join(refs)
        self.weights = [float(w) for w in weights] or [1.0] * len(refs)
        self.aggregation = aggregation
        self.options = CallOptions(label_key=label_key)
        self.functions: list[_Function] = []
        modules: dict[str, ModuleType] = {}
        for text in refs:
            try:
                ref = parse_ref(text)
            except ValueError as e:
                raise RewardError(f"reward.function: {e}") from None
            loaded = load(ref, modules)
            try:
                read_as = choose(Params.of(loaded.fn), contract)
            except NoContract as e:
                raise RewardError(f"reward function {ref.text} ({loaded.name}): {e}") from None
            self.functions.append(_Function(loaded, read_as))
        self.fn = self.functions[0].loaded.fn

    @property
    def contracts(self) -> list[str]:
        """The contract each function is read in, in order."""
        return [f.contract.name for f in self.functions]

    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult:
        return self.score_batch(RewardBatch(list(queries), list(prompts), list(responses), list(labels)))

    def score_batch(self, batch: RewardBatch) -> RewardResult:
        n = len(batch)
        outputs: dict[int, Any] = {}
        pending: dict[int, Any] = {}
        for k, f in enumerate(self.functions):
            try:
                out = f.invoke(batch, self.options)
            except RewardError:
                raise
            except Exception as e:
                outputs[k] = e
                continue
            (pending if inspect.isawaitable(out) else outputs)[k] = out
        if pending:  # async functions run together, as TRL gathers them
            outputs.update(run_coroutine(_gather(pending)))
        parts: list[Scores] = []
        for k, f in enumerate(self.functions):
            out = outputs[k]
            if isinstance(out, RewardError):
                raise out
            if isinstance(out, Exception):
                # Out of the except block: the single-sample calls' own errors are then not chained to the batch's.
                raise f.failure(out, batch, self.options) from out
            parts.append(f.contract.read(out, n, f.origin))
        names = [f.loaded.name for f in self.functions]
        log_each = any(f.contract.name == "trl" for f in self.functions)
        return combine(parts, names, self.weights, self.aggregation, batch.group_size, log_each)
