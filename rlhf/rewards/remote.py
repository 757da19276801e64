"""Remote reward endpoints (OpenRLHF protocol, batched):

    POST <url>  {"query": [prompt+response, ...], "prompts": [...], "labels": [...]}
         ->     {"rewards": [float, ...], "scores": [...] (optional), "extra_logs": {name: [...]} (optional)}

Samples go out in requests of ``request_batch``, spread round-robin over the URLs and sent concurrently
(OpenRLHF sends one sample per request). Connection failures, timeouts, HTTP 429 and 5xx are retried
``retries`` times with exponential backoff; a 4xx or a malformed response is an error at once (retrying will not
fix it). Every error is a RewardError naming the URL. Plain urllib in worker threads: no event loop needed, so it
works the same inside Ray actors, async or not.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlhf.rewards.result import RewardError, RewardResult, coerce_result

_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_MAX_BACKOFF_S = 30.0


class _Retryable(Exception):
    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # the server's Retry-After, when it gave one


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: a number of seconds or an HTTP date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class RemoteReward:
    """A :class:`~rlhf.rewards.source.RewardSource` over one or more HTTP reward endpoints.

    Args:
        urls: endpoints; request i goes to ``urls[i % len(urls)]``.
        timeout_s: per request (connect + response).
        retries: extra attempts after the first; the wait before retry k is ``backoff_s * 2**k`` (at most 30 s).
        request_batch: samples per request.
        max_concurrency: requests in flight at once (default: 4 per URL).
    """

    def __init__(
        self,
        urls: Sequence[str],
        timeout_s: float = 180.0,
        retries: int = 5,
        request_batch: int = 64,
        backoff_s: float = 1.0,
        max_concurrency: int | None = None,
    ) -> None:
        if not urls:
            raise RewardError("reward.urls is empty; give at least one endpoint")
        if request_batch < 1:
            raise RewardError(f"reward.request_batch={request_batch}: must be at least 1")
        self.urls = list(urls)
        self.timeout_s, self.retries, self.request_batch = timeout_s, max(0, retries), request_batch
        self.backoff_s = backoff_s
        self.max_concurrency = max_concurrency or 4 * len(self.urls)

    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult:
        n = len(queries)
        if n == 0:
            return RewardResult([], [], {})
        starts = range(0, n, self.request_batch)
        jobs = []
        for k, s in enumerate(starts):
            e = min(s + self.request_batch, n)
            payload = {"query": list(queries[s:e]), "prompts": list(prompts[s:e]), "labels": list(labels[s:e])}
            jobs.append((self.urls[k % len(self.urls)], payload, e - s))
        pool = ThreadPoolExecutor(max_workers=min(len(jobs), self.max_concurrency), thread_name_prefix="reward")
        try:
            futures = [pool.submit(self._request, url, payload, size) for url, payload, size in jobs]
            parts = [f.result() for f in futures]
        finally:
            # On an error, do not wait for the other requests' retries: the run stops now.
            pool.shutdown(wait=False, cancel_futures=True)
        return RewardResult.concat(parts)

    def _request(self, url: str, payload: dict[str, Any], size: int) -> RewardResult:
        last, asked = "", None
        for attempt in range(self.retries + 1):
            if attempt:  # the server's Retry-After (a full queue's 503) when longer than our own back-off
                time.sleep(min(max(self.backoff_s * 2 ** (attempt - 1), asked or 0.0), _MAX_BACKOFF_S))
            try:
                body = self._post(url, payload)
            except _Retryable as e:
                last, asked = str(e), e.retry_after_s
                continue
            return self._parse(url, body, size)
        raise RewardError(
            f"reward endpoint {url} failed {self.retries + 1} times, last: {last}; check that the server is up and "
            f"reward.urls is right (reward.timeout_s={self.timeout_s}, reward.retries={self.retries})"
        )

    def _post(self, url: str, payload: dict[str, Any]) -> bytes:
        data = json.dumps(payload).encode()
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:200].decode(errors="replace")
            if e.code in _RETRY_STATUS:
                raise _Retryable(f"HTTP {e.code} {detail}", _retry_after_s(e.headers.get("Retry-After"))) from e
            raise RewardError(f"reward endpoint {url} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", e)
            raise _Retryable(f"{type(reason).__name__}: {reason}") from e

    @staticmethod
    def _parse(url: str, body: bytes, size: int) -> RewardResult:
        try:
            value = json.loads(body)
        except ValueError as e:
            snippet = body[:120].decode(errors="replace")
            raise RewardError(f"reward endpoint {url} returned a body that is not JSON: {snippet!r}") from e
        if not isinstance(value, dict):
            raise RewardError(f"reward endpoint {url} returned {type(value).__name__}; expected a JSON object")
        return coerce_result(value, size, f"reward endpoint {url}")
