"""A reward model behind OpenRLHF's remote reward protocol, with request batching.

    POST /get_reward   {"query": [str], "prompts": [str], "labels": [str]}    (prompts, labels optional)
                    -> {"rewards": [float], "scores": [float], "extra_logs": {}}    (scores == rewards)
    GET  /health       {"status": "ok", "model": path, "batches": scoring jobs so far, "queries": queries so far}

Each query is the full text (prompt + response) as the policy's tokenizer decodes it. It is tokenised without
added special tokens, trailing pad tokens are dropped and eos is appended when missing (reward models are trained on
prompt + response + eos and score the last token); a query longer than ``max_len`` keeps its first ``max_len - 1``
tokens plus eos. The reward is the value at the last token, normalised with the model's stored mean/std when asked.

Concurrent requests are collected for ``max_wait_ms`` (or until ``batch_size`` queries are waiting) and scored
together, ``batch_size`` sequences per forward pass; scores do not depend on how queries were batched.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import torch

# FastAPI resolves the handlers' (string) annotations in this module's globals: Request must be imported here.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

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


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future


class RequestBatcher:
    """Collects the queries of concurrent requests and scores them together (one scoring job at a time)."""

    def __init__(self, scorer: RewardModelScorer, max_batch: int, max_wait_s: float) -> None:
        self.scorer = scorer
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self.forward_calls = 0  # scoring jobs run, and queries scored (shown by /health)
        self.queries = 0

    async def score(self, texts: list[str]) -> list[float]:
        if not texts:
            return []
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(texts, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work())
        return await future

    async def _work(self) -> None:
        while self._pending:
            if sum(len(p.texts) for p in self._pending) < self.max_batch:
                await asyncio.sleep(self.max_wait_s)
            batch, size = [], 0
            while self._pending and (not batch or size + len(self._pending[0].texts) <= self.max_batch):
                item = self._pending.pop(0)
                batch.append(item)
                size += len(item.texts)
            texts = [t for p in batch for t in p.texts]
            self.forward_calls += 1
            self.queries += len(texts)
            try:
                scores = await asyncio.to_thread(self.scorer.score, texts)
            except Exception as exc:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            offset = 0
            for p in batch:
                if not p.future.done():
                    p.future.set_result(scores[offset : offset + len(p.texts)])
                offset += len(p.texts)


def build_app(scorer: RewardModelScorer, *, max_batch: int = 32, max_wait_s: float = 0.01) -> FastAPI:
    app = FastAPI(title="rlhf reward model server")
    batcher = RequestBatcher(scorer, max_batch, max_wait_s)
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": scorer.name, "batches": batcher.forward_calls, "queries": batcher.queries}

    @app.post("/get_reward")
    async def get_reward(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except Exception:
            return _bad("the request body is not JSON")
        if not isinstance(body, dict):
            return _bad("the request body must be a JSON object with 'query' (a list of strings)")
        queries = body.get("query")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return _bad("'query' must be a list of strings (prompt + response texts)")
        for key in ("prompts", "labels"):
            value = body.get(key)
            if value is not None and (not isinstance(value, list) or len(value) != len(queries)):
                return _bad(f"'{key}' must be a list as long as 'query' ({len(queries)})")
        try:
            rewards = await batcher.score(queries)
        except Exception as exc:
            log.exception("scoring failed")
            return JSONResponse({"error": f"scoring failed: {type(exc).__name__}: {exc}"}, status_code=500)
        return JSONResponse({"rewards": rewards, "scores": rewards, "extra_logs": {}})

    return app


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)
