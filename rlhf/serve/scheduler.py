"""Which queries go into the reward server's next forward pass: bounded slices of every pending request.

A pass holds at most ``max_rows`` queries and ``max_tokens`` tokens (the first query of a pass is always taken), and
each pending request at most an equal share of those tokens (at least one query): a large request alone fills
whole passes, beside small ones it takes its share, so the passes that carry small requests stay short. The requests
with the fewest tokens left go first, so a small request goes into the next pass instead of waiting for a large one
to finish; a request left out of a pass (others filled it) goes first, with one query, in the next, so none is
starved. No torch here: ``rlhf-serve-rm`` checks its arguments against these numbers before loading anything.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

# Tokens per forward pass: the chunked-prefill budget vLLM and SGLang default to. On a CPU, the tiny model takes
# ~0.35 s for 4 queries of 2048 tokens; on a GPU a 7B reward model takes a few tens of ms.
DEFAULT_MAX_BATCH_TOKENS = 8192


@dataclass(eq=False)
class Job:
    """One request's queries: tokenised as they come (``rows``), taken into passes in order, then scored."""

    count: int  # queries in the request
    seq: int  # arrival order
    future: asyncio.Future | None = None  # its scores, or the exception that failed it
    guess: int = 2048  # tokens assumed for a query not tokenised yet (the server's max_len)
    rows: list[list[int]] = field(default_factory=list)
    taken: int = 0  # rows[:taken] went into a forward pass
    ready_tokens: int = 0  # tokens of rows[taken:]
    scored: int = 0
    scores: list[float] = field(default_factory=list)
    missed: bool = False  # it had queries ready and the last pass took none of them

    def add(self, rows: list[list[int]]) -> None:
        self.rows += rows
        self.ready_tokens += sum(len(r) for r in rows)

    @property
    def ready(self) -> int:
        """Queries tokenised and not yet taken into a pass."""
        return len(self.rows) - self.taken

    @property
    def tokens_left(self) -> int:
        return self.ready_tokens + (self.count - len(self.rows)) * self.guess

    @property
    def live(self) -> bool:
        return self.future is None or not self.future.done()


Slice = tuple[Job, int, int]  # rows[start:end] of a job


def plan_pass(jobs: list[Job], max_rows: int, max_tokens: int) -> list[Slice]:
    """The next forward pass: consecutive rows of each job, at most ``max_rows`` and ``max_tokens`` (the first row
    always), and per job at most ``max_tokens`` / the jobs with rows ready (its first row always). First one row of
    each job left out of the last pass (oldest first), then the jobs with the fewest tokens left first, each as many
    rows as fit. Marks the jobs left out; :func:`commit` takes the rows."""
    ready = [j for j in jobs if j.live and j.ready]
    if not ready:
        return []
    share = max_tokens // len(ready)
    ends = {j: j.taken for j in ready}
    spent = dict.fromkeys(ready, 0)
    rows = tokens = 0

    def take(job: Job, most: int) -> None:
        nonlocal rows, tokens
        while ends[job] < len(job.rows) and most > 0 and rows < max_rows:
            n = len(job.rows[ends[job]])
            if (rows and tokens + n > max_tokens) or (spent[job] and spent[job] + n > share):
                return
            ends[job] += 1
            spent[job] += n
            rows, tokens, most = rows + 1, tokens + n, most - 1

    for job in sorted((j for j in ready if j.missed), key=lambda j: j.seq):
        take(job, 1)
    for job in sorted(ready, key=lambda j: (j.tokens_left, j.seq)):
        take(job, max_rows)
    for job in ready:
        job.missed = ends[job] == job.taken
    return [(j, j.taken, ends[j]) for j in ready if ends[j] > j.taken]


def commit(parts: list[Slice]) -> list[list[int]]:
    """Take the planned rows out of their jobs; returns them in the order of ``parts``."""
    out: list[list[int]] = []
    for job, start, end in parts:
        rows = job.rows[start:end]
        job.taken = end
        job.ready_tokens -= sum(len(r) for r in rows)
        out += rows
    return out
