"""The reward server's request batcher: concurrent requests' queries scored together, a bounded pass at a time.

A request's queries are tokenised as it arrives, off the forward thread (a small one on the event loop, a large
one in chunks in a worker thread, each query only as far as ``max_len`` needs); a single forward thread runs the
passes :func:`~rlhf.serve.scheduler.plan_pass` plans, each as forward calls over queries of similar length, shortest
first, every call's scores handed out as soon as it ends. So a small request waits for the forward call in progress
and its own, never for a large request to be tokenised or scored to the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from rlhf.serve.limits import Admission
from rlhf.serve.scheduler import DEFAULT_MAX_BATCH_TOKENS, Job, commit, plan_pass
from rlhf.serve.scorer import RewardModelScorer, length_groups

# a request this small is tokenised on the event loop (about a millisecond): no thread hop
INLINE_CHARS = 4096
INLINE_QUERIES = 8
CHUNK_CHARS = 2**18  # a large request is tokenised this many characters at a time (a fraction of a second each)


class RequestBatcher:
    """Scores the queries of concurrent requests together: at most ``max_batch`` queries and ``max_tokens`` tokens
    per forward pass, each request at most an equal share of them, the requests with the fewest tokens left first."""

    def __init__(
        self,
        scorer: RewardModelScorer,
        max_batch: int,
        max_wait_s: float,
        max_queue: int | None = None,
        max_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> None:
        self.scorer = scorer
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_wait_s = max_wait_s
        self.admission = Admission(max_queue if max_queue is not None else 2**62)
        self._jobs: list[Job] = []  # requests not answered yet, oldest first
        self._seq = 0
        self._worker: asyncio.Task | None = None
        self._wake = asyncio.Event()  # set when rows are ready or a request left
        self._forward = ThreadPoolExecutor(1, thread_name_prefix="rm-forward")  # one pass at a time
        self.forward_calls = 0  # passes run, and queries and tokens scored (shown by /health)
        self.queries = 0
        self.tokens = 0

    async def score(self, texts: list[str]) -> list[float]:
        """The scores of ``texts`` (already admitted: see :attr:`admission`). Cancelling the awaiting task (a
        timeout) drops the queries not yet scored."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        self._seq += 1
        job = Job(len(texts), self._seq, loop.create_future(), guess=self.scorer.max_len, scores=[0.0] * len(texts))
        self._jobs.append(job)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        try:
            await self._tokenize(job, texts)
            return await job.future
        finally:
            if job in self._jobs:
                self._jobs.remove(job)
            self._wake.set()

    async def _tokenize(self, job: Job, texts: list[str]) -> None:
        for chunk in self._chunks(texts):
            if job.future.done():  # failed by a pass, or cancelled
                return
            if len(chunk) <= INLINE_QUERIES and sum(map(self.scorer.encode_cost, chunk)) <= INLINE_CHARS:
                rows = self.scorer.encode_many(chunk)
            else:  # the tokenizers release the GIL: the event loop and the forward thread go on meanwhile
                rows = await asyncio.to_thread(self.scorer.encode_many, chunk)
            job.add(rows)
            self._wake.set()

    def _chunks(self, texts: list[str]) -> Iterator[list[str]]:
        chunk: list[str] = []
        cost = 0
        for text in texts:
            n = self.scorer.encode_cost(text)
            if chunk and cost + n > CHUNK_CHARS:
                yield chunk
                chunk, cost = [], 0
            chunk.append(text)
            cost += n
        if chunk:
            yield chunk

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._jobs:
            ready = [j for j in self._jobs if j.live and j.ready]
            if not ready:
                self._wake.clear()
                await self._wake.wait()
                continue
            if sum(j.ready for j in ready) < self.max_batch and sum(j.ready_tokens for j in ready) < self.max_tokens:
                await asyncio.sleep(self.max_wait_s)  # let concurrent requests join this pass
            parts = plan_pass(self._jobs, self.max_batch, self.max_tokens)
            if not parts:
                continue
            rows = commit(parts)
            owners = [(job, i) for job, start, end in parts for i in range(start, end)]
            # the pass runs as batches of similar length, shortest first, each answered as soon as it is scored: a
            # small request waits for the batch in progress and its own, not for a long query beside it
            for group in length_groups([len(r) for r in rows], self.max_batch):
                group = [k for k in group if owners[k][0].live]  # a request that timed out is not scored further
                if group:
                    await self._run(loop, [rows[k] for k in group], [owners[k] for k in group])

    async def _run(self, loop: asyncio.AbstractEventLoop, rows: list[list[int]], owners: list[tuple[Job, int]]) -> None:
        """One forward call on the forward thread; its scores go to their requests."""
        self.forward_calls += 1
        self.queries += len(rows)
        self.tokens += sum(len(r) for r in rows)
        started = time.monotonic()
        try:
            scores = await loop.run_in_executor(self._forward, self.scorer.score_rows, rows)
        except Exception as exc:
            for job, _ in owners:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        self.admission.completed(len(rows), time.monotonic() - started)
        for (job, i), score in zip(owners, scores, strict=True):
            job.scores[i] = score
            job.scored += 1
            if job.scored == job.count and not job.future.done():
                job.future.set_result(job.scores)
