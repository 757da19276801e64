"""Limits every HTTP service we ship applies (``rlhf-serve-rm``, the OpenAI-compatible agent server).

- a body larger than the limit is refused with 413 naming the limit, after at most :data:`DRAIN_BYTES` more of it
  were read and dropped (so that the client, still sending, reads the answer instead of a reset connection);
- a body that does not arrive within the request timeout is refused with 408;
- :class:`Admission` bounds the work held at once (queries, or calls): beyond it 503 with ``Retry-After``, the
  seconds the work already held takes at the measured rate.

The servers format their own error bodies (the reward protocol and OpenAI's differ); this module gives the checks,
the numbers and the headers.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

DRAIN_BYTES = 64 * 2**20
MIN_BODY_BYTES = 1024
RETRY_AFTER_MAX_S = 60


def size_text(n: float) -> str:
    """Bytes as a person reads them: 4096 bytes, 512.0 KB, 1.00 MB (KB and MB of 1024)."""
    if n < 10 * 2**10:
        return f"{int(n)} bytes"
    if n < 2**20:
        return f"{n / 2**10:.1f} KB"
    return f"{n / 2**20:.2f} MB"


@dataclass(frozen=True)
class ServeLimits:
    """What one request, and the server as a whole, may ask for (the options of ``rlhf-serve-rm``)."""

    max_body_bytes: int = 16 * 2**20  # --max-body-mb 16: 1024 queries of ~4k tokens of text
    max_queries: int = 1024  # --max-queries: per request (the trainer sends reward.request_batch, 64 by default)
    max_queue: int = 8192  # --max-queue: queries held at once, across requests
    request_timeout_s: float = 120.0  # --request-timeout-s: body, queue and scoring (the trainer waits 180 s)

    def problems(self) -> list[str]:
        out = []
        if self.max_body_bytes < MIN_BODY_BYTES:
            out.append("--max-body-mb must allow at least 1 KB")
        if self.max_queries < 1:
            out.append("--max-queries must be at least 1")
        if self.max_queue < self.max_queries:
            out.append(
                f"--max-queue {self.max_queue} is smaller than --max-queries {self.max_queries}: a request of the "
                "largest size could never be admitted"
            )
        if self.request_timeout_s <= 0:
            out.append("--request-timeout-s must be positive")
        return out


class BodyTooLarge(Exception):
    def __init__(self, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        got = size_text(size) if size is not None else f"more than {size_text(limit)}"
        super().__init__(f"the request body is {got}; this server takes at most {size_text(limit)} per request")


class BodyTimeout(Exception):
    pass


async def read_body(request: Any, limit: int, timeout_s: float) -> bytes:
    """The body of ``request`` (a Starlette Request), at most ``limit`` bytes, within ``timeout_s``.

    Raises :class:`BodyTooLarge` (checked on Content-Length first, then while streaming) or :class:`BodyTimeout`."""
    declared = request.headers.get("content-length")
    size = int(declared) if declared and declared.isdigit() else None
    try:
        return await asyncio.wait_for(_read(request, limit, size), timeout_s)
    except asyncio.TimeoutError:
        raise BodyTimeout(f"the request body did not arrive within {timeout_s:g} s") from None


async def _read(request: Any, limit: int, size: int | None) -> bytes:
    if size is not None and size > limit:
        await _drain(request, size)
        raise BodyTooLarge(size, limit)
    chunks, got = [], 0
    stream = request.stream()
    async for chunk in stream:
        got += len(chunk)
        if got > limit:
            await _drain(request, size, stream)
            raise BodyTooLarge(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(request: Any, size: int | None, stream: Any = None) -> None:
    """Read and drop what the client is still sending (up to DRAIN_BYTES), so that it gets to read our answer."""
    if size is not None and size > DRAIN_BYTES:
        return  # not worth reading: the connection is closed after the answer
    stream = stream if stream is not None else request.stream()
    dropped = 0
    async for chunk in stream:
        dropped += len(chunk)
        if dropped > DRAIN_BYTES:
            return


CLOSE = {"Connection": "close"}  # after a refused body: whatever was left unread is not parsed as a request


class Admission:
    """At most ``capacity`` units (queries or calls) held at once; the rate they complete at, for Retry-After."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._rate: float | None = None  # units per second, exponentially smoothed
        self._t0 = time.monotonic()

    def try_admit(self, n: int) -> bool:
        if self.held + n > self.capacity:
            return False
        self.held += n
        return True

    def release(self, n: int) -> None:
        self.held = max(self.held - n, 0)

    def completed(self, n: int, seconds: float) -> None:
        """``n`` units of work took ``seconds`` (a forward pass, an engine call)."""
        if n <= 0 or seconds <= 0:
            return
        rate = n / seconds
        self._rate = rate if self._rate is None else 0.8 * self._rate + 0.2 * rate

    def retry_after_s(self) -> int:
        """Whole seconds until the work held now is done, at the measured rate (1 to 60)."""
        if not self._rate:
            return 1
        return int(min(max(math.ceil(self.held / self._rate), 1), RETRY_AFTER_MAX_S))

    def retry_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s())}
