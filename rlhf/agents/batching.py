"""Batching single-sample generate requests from many concurrent episodes into few engine calls.

Agent code asks for one continuation at a time, but generating one sample per call is slow (on CPU especially).
Two batchers turn concurrent single requests into ``engine.generate(prompts, sampling)`` calls:

* :class:`LockstepBatcher` (agent executors): dispatches once every live episode is waiting on a generation, so
  turn k of all episodes goes out as one call. The batches, and hence seeded sampling, are deterministic.
* :class:`WindowBatcher` (the OpenAI server, whose requests arrive over HTTP at any time): dispatches what arrived
  within a short window, one engine call at a time, prompts of very different lengths in separate calls (short
  ones first); what arrives meanwhile forms the next batch.

Requests are grouped by their sampling settings apart from ``max_new_tokens``: a group is generated with the largest
limit in it and each output is cut to its own limit afterwards (the kept tokens and their log-probs are the same as
a shorter call would give), so per-episode length budgets do not split a turn into many calls. The engine is
synchronous; it runs in a worker thread so the event loop (step timeouts, HTTP) stays responsive, and only one
engine call runs at a time per batcher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from rlhf.agents.errors import RolloutEngineError
from rlhf.backends.contract.rollout import Rollout, SamplingSpec


@dataclass
class _Request:
    order: tuple[int, int]  # (episode, sequence number): the deterministic order within a batch
    prompt_ids: list[int]
    sampling: SamplingSpec
    future: asyncio.Future


def cap_rollout(rollout: Rollout, max_new_tokens: int) -> Rollout:
    """``rollout`` cut to ``max_new_tokens`` output tokens (finish_reason "length" when something was cut)."""
    if len(rollout.output_ids) <= max_new_tokens:
        return rollout
    return dataclasses.replace(
        rollout,
        output_ids=rollout.output_ids[:max_new_tokens],
        action_mask=rollout.action_mask[:max_new_tokens],
        logprobs=rollout.logprobs[:max_new_tokens],
        finish_reason="length",
        extra=dict(rollout.extra),
    )


def _group_key(spec: SamplingSpec) -> SamplingSpec:
    return dataclasses.replace(spec, max_new_tokens=1, n=1)


async def _generate_groups(engine: Any, requests: list[_Request], call_index: int) -> None:
    """Serve ``requests`` with one engine call per sampling group; results (or the error) go to the futures."""
    groups: dict[SamplingSpec, list[_Request]] = {}
    for req in sorted(requests, key=lambda r: r.order):
        groups.setdefault(_group_key(req.sampling), []).append(req)
    for g, (key, reqs) in enumerate(groups.items()):
        # A fixed seed would replay the same random draws every turn: derive one per engine call instead.
        seed = None if key.seed is None else key.seed + 7919 * call_index + g
        spec = dataclasses.replace(key, max_new_tokens=max(r.sampling.max_new_tokens for r in reqs), seed=seed)
        try:
            outs = await asyncio.to_thread(engine.generate, [r.prompt_ids for r in reqs], spec)
            if len(outs) != len(reqs):
                raise RolloutEngineError(f"the rollout engine returned {len(outs)} samples for {len(reqs)} prompts")
        except BaseException as exc:
            err = exc if isinstance(exc, RolloutEngineError) else RolloutEngineError(f"rollout engine failed: {exc!r}")
            if err is not exc:
                err.__cause__ = exc
            for req in reqs:
                if not req.future.done():
                    req.future.set_exception(err)
            if not isinstance(exc, Exception):
                raise
            continue
        for req, out in zip(reqs, outs, strict=True):
            if not req.future.done():
                req.future.set_result(cap_rollout(out, req.sampling.max_new_tokens))


class LockstepBatcher:
    """Batches the generate calls of ``live`` concurrent episodes turn by turn.

    Every episode must call :meth:`finished` when it ends (in a ``finally``), so that the others are not kept
    waiting for it.
    """

    def __init__(self, engine: Any, live: int) -> None:
        self.engine = engine
        self.live = live
        self._waiting: list[_Request] = []
        self._seq = itertools.count()
        self._calls = itertools.count()
        self._task: asyncio.Task | None = None

    async def generate(self, episode: int, prompt_ids: list[int], sampling: SamplingSpec) -> Rollout:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Request((episode, next(self._seq)), list(prompt_ids), sampling, future))
        self._maybe_dispatch()
        return await future

    def finished(self, episode: int) -> None:
        self.live -= 1
        self._maybe_dispatch()

    def _maybe_dispatch(self) -> None:
        if self._task is not None or not self._waiting:
            return
        if len({r.order[0] for r in self._waiting}) < self.live:
            return  # someone is still stepping: wait for them so that this turn goes out as one call
        batch, self._waiting = self._waiting, []
        self._task = asyncio.get_running_loop().create_task(self._dispatch(batch))

    async def _dispatch(self, batch: list[_Request]) -> None:
        try:
            await _generate_groups(self.engine, batch, next(self._calls))
        finally:
            self._task = None
            self._maybe_dispatch()


class WindowBatcher:
    """Batches generate calls that arrive within ``max_wait_s`` of each other (at most ``max_batch`` per call).

    Bound to the event loop it is first used on.
    """

    def __init__(self, engine: Any, max_wait_s: float = 0.005, max_batch: int = 256) -> None:
        self.engine = engine
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._seq = itertools.count()
        self._calls = itertools.count()
        self._worker: asyncio.Task | None = None

    @property
    def waiting(self) -> int:
        """Requests waiting for the next engine call (not those of the call under way)."""
        return len(self._pending)

    async def generate(self, prompt_ids: list[int], sampling: SamplingSpec) -> Rollout:
        future = asyncio.get_running_loop().create_future()
        n = next(self._seq)
        self._pending.append(_Request((n, n), list(prompt_ids), sampling, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work())
        return await future

    async def _work(self) -> None:
        while self._pending:
            if len(self._pending) < self.max_batch:
                await asyncio.sleep(self.max_wait_s)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            for bucket in length_buckets(batch):  # short prompts first, never padded to a long one's length
                await _generate_groups(self.engine, bucket, next(self._calls))


def length_buckets(requests: list[_Request], slack: int = 32) -> list[list[_Request]]:
    """``requests`` split by prompt length, shortest first: a bucket's longest prompt is at most twice its shortest
    (plus ``slack`` tokens). A long prompt batched with short ones would pad them all to its length and make every
    short call as slow as the long one; apart, the short ones are answered first."""
    buckets: list[list[_Request]] = []
    for req in sorted(requests, key=lambda r: len(r.prompt_ids)):
        if buckets and len(req.prompt_ids) <= 2 * len(buckets[-1][0].prompt_ids) + slack:
            buckets[-1].append(req)
        else:
            buckets.append([req])
    return buckets
