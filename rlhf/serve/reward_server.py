"""A reward model behind OpenRLHF's remote reward protocol, with request batching.

    POST /get_reward   {"query": [str], "prompts": [str], "labels": [str]}    (prompts, labels optional)
                    -> {"rewards": [float], "scores": [float], "extra_logs": {}}    (scores == rewards)
    GET  /health       {"status": "ok", "model": path, "batches": forward passes so far, "queries": queries so far, ...}

Each query is the full text (prompt + response); how it is tokenised and cut to ``max_len`` tokens, and scored:
:mod:`rlhf.serve.scorer`. A query's text is tokenised only as far as ``max_len`` needs, so a 10 MB query costs what a
``max_len``-token one does.

Concurrent requests are collected for ``max_wait_ms`` (or until a pass is full) and scored together: each pass
holds at most ``batch_size`` queries and ``max_batch_tokens`` tokens, each pending request at most an equal share of
them, the requests with the fewest tokens left first, and a request left out of a pass goes first in the next
(:mod:`rlhf.serve.scheduler`). A pass runs as forward calls over queries of similar length, shortest first, each
answered as soon as it is scored; requests are tokenised off the forward thread (:mod:`rlhf.serve.batcher`). So a
small request waits for the forward call in progress and its own, never for a large request to finish; scores do
not depend on how queries were batched. ``/health`` is answered by the event loop, never behind a forward call.

Limits (:class:`ServeLimits`, ``rlhf-serve-rm --help``): a body over ``max_body_bytes`` or a request of more than
``max_queries`` queries gets 413 naming the limit; beyond ``max_queue`` queries held at once (admitted, not yet
answered) 503 with ``Retry-After``; a request not answered within ``request_timeout_s`` (body, queue and scoring)
gets 504 and its remaining queries are dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict

# FastAPI resolves the handlers' (string) annotations in this module's globals: Request must be imported here.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from rlhf.serve.batcher import RequestBatcher
from rlhf.serve.limits import CLOSE, BodyTimeout, BodyTooLarge, ServeLimits, read_body
from rlhf.serve.scheduler import DEFAULT_MAX_BATCH_TOKENS
from rlhf.serve.scorer import RewardModelScorer, load_reward_model

__all__ = ["RequestBatcher", "RewardModelScorer", "build_app", "load_reward_model"]

log = logging.getLogger(__name__)


def build_app(
    scorer: RewardModelScorer,
    *,
    max_batch: int = 32,
    max_wait_s: float = 0.01,
    limits: ServeLimits | None = None,
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
) -> FastAPI:
    limits = limits or ServeLimits()
    app = FastAPI(title="rlhf reward model server")
    batcher = RequestBatcher(scorer, max_batch, max_wait_s, limits.max_queue, max_batch_tokens)
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "model": scorer.name,
            "batches": batcher.forward_calls,
            "queries": batcher.queries,
            "tokens": batcher.tokens,
            "max_batch_tokens": batcher.max_tokens,
            "queued": batcher.admission.held,
            "limits": asdict(limits),
        }

    @app.post("/get_reward")
    async def get_reward(request: Request) -> JSONResponse:
        deadline = time.monotonic() + limits.request_timeout_s
        try:
            raw = await read_body(request, limits.max_body_bytes, limits.request_timeout_s)
        except BodyTooLarge as exc:
            return _error(413, f"{exc} (--max-body-mb): send fewer queries per request", CLOSE)
        except BodyTimeout as exc:
            return _error(408, f"{exc} (--request-timeout-s)", CLOSE)
        try:
            # a large body parses off the event loop, which keeps answering /health and small requests
            body = json.loads(raw) if len(raw) < 2**20 else await asyncio.to_thread(json.loads, raw)
        except ValueError:
            return _error(400, "the request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object with 'query' (a list of strings)")
        queries = body.get("query")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return _error(400, "'query' must be a list of strings (prompt + response texts)")
        for key in ("prompts", "labels"):
            value = body.get(key)
            if value is not None and (not isinstance(value, list) or len(value) != len(queries)):
                return _error(400, f"'{key}' must be a list as long as 'query' ({len(queries)})")
        if len(queries) > limits.max_queries:
            return _error(
                413,
                f"the request has {len(queries)} queries; this server takes at most {limits.max_queries} per "
                "request (--max-queries): send them in several requests (the trainer's reward.request_batch)",
            )
        admission = batcher.admission
        if not admission.try_admit(len(queries)):
            return _error(
                503,
                f"the server holds {admission.held} queries, and {len(queries)} more would exceed its queue of "
                f"{admission.capacity} (--max-queue); retry after {admission.retry_after_s()} s",
                admission.retry_headers(),
            )
        try:
            rewards = await asyncio.wait_for(batcher.score(queries), max(deadline - time.monotonic(), 0.001))
        except asyncio.TimeoutError:
            return _error(
                504,
                f"scoring {len(queries)} queries did not finish within {limits.request_timeout_s:g} s "
                f"(--request-timeout-s); the rest of this request was dropped",
            )
        except Exception as exc:
            log.exception("scoring failed")
            return _error(500, f"scoring failed: {type(exc).__name__}: {exc}")
        finally:
            admission.release(len(queries))
        return JSONResponse({"rewards": rewards, "scores": rewards, "extra_logs": {}})

    return app


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
