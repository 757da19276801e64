"""A reward model behind OpenRLHF's remote reward protocol, with request batching.

    POST /get_reward   {"query": [str], "prompts": [str], "labels": [str]}    (prompts, labels optional)
                    -> {"rewards": [float], "scores": [float], "extra_logs": {}}    (scores == rewards)
    GET  /health       {"status": "ok", "model": path, "batches": scoring jobs so far, "queries": queries so far}

Each query is the full text (prompt + response) as the policy's tokenizer decodes it. It is tokenised without
added special tokens, trailing pad tokens are dropped and eos is appended when missing (reward models are trained on
prompt + response + eos and score the last token); a query longer than ``max_len`` keeps its first ``max_len - 1``
tokens plus eos. The reward is the value at the last token, normalised with the model's stored mean/std when asked.

Concurrent requests are collected for ``max_wait_ms`` (or until ``batch_size`` queries are waiting) and scored
together, ``batch_size`` sequences per forward pass; scores do not depend on how queries were batched. A large
request is scored a forward pass at a time, and each pass is filled with the requests that have the fewest queries
left first (the oldest request keeps a quarter of every pass, so it is never starved): a small request waits for
the pass in progress and its own, not for a large one to finish. ``/health`` is answered by the event loop, never
behind a forward pass.

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
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

# FastAPI resolves the handlers' (string) annotations in this module's globals: Request must be imported here.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from rlhf.serve.limits import CLOSE, Admission, BodyTimeout, BodyTooLarge, ServeLimits, read_body

log = logging.getLogger(__name__)


class RewardModelScorer:
    """Scores texts with a reward model: ``score(texts) -> list[float]``."""

    def __init__(
        self, model: Any, tokenizer: Any, *, max_len: int = 2048, batch_size: int = 32, name: str = ""
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the reward model's tokenizer has no eos token")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.batch_size = batch_size
        self.name = name
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.device = next(model.parameters()).device

    @classmethod
    def from_path(
        cls,
        path: str,
        *,
        normalize: bool = False,
        precision: str = "fp32",
        device: str = "cpu",
        value_head_prefix: str = "score",
        max_len: int = 2048,
        batch_size: int = 32,
        allow_untrained_head: bool = False,
    ) -> RewardModelScorer:
        from transformers import AutoTokenizer

        model = load_reward_model(
            path,
            normalize=normalize,
            precision=precision,
            value_head_prefix=value_head_prefix,
            allow_untrained_head=allow_untrained_head,
        )
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(model.to(device), tokenizer, max_len=max_len, batch_size=batch_size, name=path)

    def encode(self, text: str) -> list[int]:
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        while ids and ids[-1] == self.pad_id and self.pad_id != self.tokenizer.eos_token_id:
            ids.pop()
        if not ids or ids[-1] != self.tokenizer.eos_token_id:
            ids.append(self.tokenizer.eos_token_id)
        if len(ids) > self.max_len:
            ids = ids[: self.max_len - 1] + [self.tokenizer.eos_token_id]
        return ids

    @torch.no_grad()
    def score(self, texts: list[str]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            rows = [self.encode(t) for t in texts[start : start + self.batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):  # right padding: the last real token is at len(r) - 1
                ids[i, : len(r)] = torch.tensor(r)
                mask[i, : len(r)] = 1
            out += self.model.rewards(ids.to(self.device), mask.to(self.device)).float().cpu().tolist()
        return out


def load_reward_model(
    path: str, *, normalize: bool, precision: str, value_head_prefix: str, allow_untrained_head: bool = False
) -> Any:
    """The reward model with a ``rewards(input_ids, attention_mask) -> [B]`` method.

    Uses the platform's value-head loader (rlhf.models) when present: it reads our RM checkpoints (any
    ``value_head_prefix``, stored mean/std) as well as plain sequence-classification ones. Otherwise transformers'
    ``AutoModelForSequenceClassification`` with one label (reward = logit at the last non-pad token).

    A checkpoint without value-head weights (a policy, say) raises
    :class:`~rlhf.models.head_check.UntrainedValueHead` unless ``allow_untrained_head``: its scores would be noise.
    The safetensors header is read first, so the refusal comes before the weights are loaded.
    """
    if not allow_untrained_head:
        from rlhf.models.head_check import missing_value_head

        problem = missing_value_head(path, value_head_prefix)
        if problem is not None:
            raise problem
    try:
        from rlhf.models.forward import value_model_rewards
        from rlhf.models.value_head import load_value_model
    except ImportError:
        load_value_model = None
    if load_value_model is not None:
        model = load_value_model(
            path,
            "reward",
            precision=precision,
            value_head_prefix=value_head_prefix,
            normalize_reward=normalize,
            require_trained_head=not allow_untrained_head,
        )
        model.rewards = lambda ids, mask: value_model_rewards(model, ids, mask, normalized=True)
        return model
    from transformers import AutoModelForSequenceClassification

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype)
    mean, std = float(getattr(model.config, "mean", 0.0)), float(getattr(model.config, "std", 1.0))

    def rewards(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # transformers pools at the last token that is not config.pad_token_id (right padding keeps that right).
        r = model(input_ids=ids, attention_mask=mask).logits[:, 0]
        return (r - mean) / std if normalize else r

    model.rewards = rewards
    return model


@dataclass(eq=False)
class _Job:
    texts: list[str]
    future: asyncio.Future
    seq: int
    taken: int = 0  # texts[:taken] went into a forward pass
    scores: list[float] = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.texts) - self.taken


class RequestBatcher:
    """Scores the queries of concurrent requests together, one forward pass of at most ``max_batch`` at a time."""

    def __init__(
        self, scorer: RewardModelScorer, max_batch: int, max_wait_s: float, max_queue: int | None = None
    ) -> None:
        self.scorer = scorer
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.admission = Admission(max_queue if max_queue is not None else 2**62)
        self._jobs: list[_Job] = []  # requests with queries not yet in a forward pass, oldest first
        self._seq = 0
        self._worker: asyncio.Task | None = None
        self.forward_calls = 0  # scoring jobs run, and queries scored (shown by /health)
        self.queries = 0

    async def score(self, texts: list[str]) -> list[float]:
        """The scores of ``texts`` (already admitted: see :attr:`admission`). Cancelling the awaiting task (a
        timeout) drops the queries not yet scored."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        self._seq += 1
        job = _Job(list(texts), loop.create_future(), self._seq, scores=[0.0] * len(texts))
        self._jobs.append(job)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        try:
            return await job.future
        finally:
            if job in self._jobs:
                self._jobs.remove(job)

    def _take(self) -> list[tuple[_Job, int, int]]:
        """The next forward pass: (job, start, end) slices, the fewest-left first, the oldest job's share kept."""
        live = [j for j in self._jobs if j.left and not j.future.done()]
        if not live:
            return []
        plan: dict[_Job, int] = {}
        room = self.max_batch
        if len(live) > 1:
            plan[live[0]] = min(live[0].left, max(1, self.max_batch // 4))
            room -= plan[live[0]]
        for job in sorted(live, key=lambda j: (j.left - plan.get(j, 0), j.seq)):
            if room <= 0:
                break
            k = min(job.left - plan.get(job, 0), room)
            if k > 0:
                plan[job] = plan.get(job, 0) + k
                room -= k
        parts = []
        for job, k in plan.items():
            parts.append((job, job.taken, job.taken + k))
            job.taken += k
            if not job.left:
                self._jobs.remove(job)
        return parts

    async def _work(self) -> None:
        while any(j.left and not j.future.done() for j in self._jobs):
            if sum(j.left for j in self._jobs) < self.max_batch:
                await asyncio.sleep(self.max_wait_s)  # let concurrent requests join this pass
            parts = self._take()
            if not parts:
                continue
            texts = [t for job, a, b in parts for t in job.texts[a:b]]
            self.forward_calls += 1
            self.queries += len(texts)
            started = time.monotonic()
            try:
                scores = await asyncio.to_thread(self.scorer.score, texts)
            except Exception as exc:
                for job, _, _ in parts:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            self.admission.completed(len(texts), time.monotonic() - started)
            offset = 0
            for job, a, b in parts:
                job.scores[a:b] = scores[offset : offset + b - a]
                offset += b - a
                if b == len(job.texts) and not job.future.done():
                    job.future.set_result(job.scores)


def build_app(
    scorer: RewardModelScorer, *, max_batch: int = 32, max_wait_s: float = 0.01, limits: ServeLimits | None = None
) -> FastAPI:
    limits = limits or ServeLimits()
    app = FastAPI(title="rlhf reward model server")
    batcher = RequestBatcher(scorer, max_batch, max_wait_s, limits.max_queue)
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "model": scorer.name,
            "batches": batcher.forward_calls,
            "queries": batcher.queries,
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
