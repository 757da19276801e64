"""An OpenAI-compatible HTTP server over a rollout engine, recording token-level traces per session.

Endpoints (bound to 127.0.0.1 on a free port by default; FastAPI + uvicorn in a background thread):

    GET  /health                 {"status": "ok", "model": name}
    GET  /v1/models              the one model
    POST /tokenize               {"messages": [...], "add_generation_prompt": true} or {"prompt": str}
                                 -> {"tokens", "count", "max_model_len"}
    POST /v1/chat/completions    OpenAI's request and response, plus:
        request  ``session_id`` (body field, or header ``X-Session-Id``): the session the call belongs to. Sessions
                 are opened by the executor (unknown ids get 404); without one the call is served and not recorded.
        response ``token_ids: {prompt_token_ids, completion_token_ids}`` and OpenAI-format ``logprobs`` (the sampled
                 token's log-prob only) when asked for.

Sampling: the server's settings (the run's rollout temperature, top_p, top_k) are used whatever the request says,
because the trainer recomputes log-probs at that temperature; ``temperature``/``top_p``/``top_k``/``seed`` from the
request are honoured only with ``honor_request_sampling=True``. ``max_tokens`` (or ``max_completion_tokens``) and
``stop`` are honoured, capped by the session's length budget. Once a session's budget (``max_length`` tokens) is
spent, calls return an empty completion with ``finish_reason: "length"`` and are not recorded. Only ``n=1``.

Limits (constructor options; an agent file's ``AgentExecutor(OpenAIAgentExecutor)`` passes them as
``server_options``): a body over ``max_body_bytes`` (8 MB) or more than ``max_messages`` (1024) messages gets 413
naming the limit; beyond ``max_queue`` calls held at once (1024; the executor runs at most ``max_concurrency``
sessions, 512) 503 with ``Retry-After``; ``call_timeout_s`` bounds the body's arrival and the generation (504). The
engine runs in a worker thread and a large prompt is rendered and tokenised in one too, so ``/health`` is answered
while they run.

The reply's content keeps special tokens generated mid-text and drops the final stop token (the chat template adds
it back), and a matched stop string stays in the content: sending the reply back verbatim keeps the session's
prefix stable (see rlhf.agents.sessions). Concurrent calls are batched into few engine calls (WindowBatcher).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

# FastAPI resolves the handlers' (string) annotations in this module's globals: Request must be imported here.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from rlhf.agents.batching import WindowBatcher
from rlhf.agents.errors import RolloutEngineError
from rlhf.agents.sessions import CallTrace, PrefixError, Session, SessionError, SessionStore
from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.serve.limits import CLOSE, Admission, BodyTimeout, BodyTooLarge, read_body

SESSION_HEADER = "x-session-id"


OFFLOAD_BYTES = 64 * 2**10  # a body this large is parsed, rendered and tokenised off the event loop


class BadRequest(Exception):
    def __init__(
        self, status: int, message: str, code: str = "invalid_request_error", headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers


class OpenAIServer:
    """Serves ``engine`` (any ``generate(prompts, sampling) -> list[Rollout]``) with ``tokenizer``'s chat template.

    ``sampling`` and ``max_length`` may be changed between batches (the executor sets them per run).
    """

    def __init__(
        self,
        engine: Any,
        tokenizer: Any,
        *,
        sampling: SamplingSpec | None = None,
        max_length: int = 4096,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        call_timeout_s: float = 300.0,
        max_wait_s: float = 0.005,
        max_batch: int = 256,
        honor_request_sampling: bool = False,
        max_body_bytes: int = 8 * 2**20,
        max_messages: int = 1024,
        max_queue: int = 1024,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSpec()
        self.max_length = max_length
        self.model_name = model_name or getattr(tokenizer, "name_or_path", None) or "policy"
        self.host = host
        self.port = port
        self.call_timeout_s = call_timeout_s
        self.honor_request_sampling = honor_request_sampling
        self.max_body_bytes = max_body_bytes
        self.max_messages = max_messages
        self.admission = Admission(max_queue)  # calls held at once (admitted, not yet answered)
        self.sessions = SessionStore()
        self.calls = 0  # completions served (for tests and logs)
        self._max_wait_s = max_wait_s
        self._max_batch = max_batch
        self._batcher: WindowBatcher | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What ``openai.AsyncOpenAI(base_url=...)`` takes."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def waiting(self) -> int:
        """Generation requests waiting for the next engine call (batched into it when it starts)."""
        return 0 if self._batcher is None else self._batcher.waiting

    def start(self, timeout_s: float = 30.0) -> str:
        """Bind, serve in a daemon thread, wait until it answers; returns :attr:`base_url`."""
        import uvicorn

        if self.running:
            return self.base_url
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))  # port 0: the OS picks a free one, no race with another process
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.build_app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"openai-server:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the OpenAI-compatible server on {self.url} did not start within {timeout_s:g} s")
            time.sleep(0.01)
        return self.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None
        self._batcher = None

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- sessions -------------------------------------------------------------------------------------------------

    def open_session(self, session_id: str) -> Session:
        return self.sessions.open(session_id)

    def close_session(self, session_id: str) -> Session | None:
        return self.sessions.close(session_id)

    # -- serving --------------------------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        """The batcher's engine: whatever engine is current."""
        return self.engine.generate(prompts, sampling)

    def build_app(self) -> FastAPI:
        app = FastAPI(title="rlhf OpenAI-compatible rollout server")

        def error(exc: BadRequest) -> JSONResponse:
            body = {"error": {"message": str(exc), "type": exc.code, "code": exc.status}}
            return JSONResponse(body, status_code=exc.status, headers=exc.headers)

        async def body_of(request: Request) -> tuple[dict, int]:
            try:
                raw = await read_body(request, self.max_body_bytes, self.call_timeout_s)
            except BodyTooLarge as exc:
                raise BadRequest(413, f"{exc} (max_body_bytes)", "request_too_large", CLOSE) from None
            except BodyTimeout as exc:
                raise BadRequest(408, f"{exc} (call_timeout_s)", "timeout", CLOSE) from None
            try:
                body = json.loads(raw) if len(raw) < OFFLOAD_BYTES else await asyncio.to_thread(json.loads, raw)
            except ValueError:
                raise BadRequest(400, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise BadRequest(400, "the request body must be a JSON object")
            return body, len(raw)

        @app.get("/health")
        async def health() -> dict:
            return {"status": "ok", "model": self.model_name, "calls": self.calls, "held": self.admission.held}

        @app.get("/v1/models")
        async def models() -> dict:
            card = {"id": self.model_name, "object": "model", "owned_by": "rlhf", "max_model_len": self.max_length}
            return {"object": "list", "data": [card]}

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Any:
            try:
                body, _ = await body_of(request)
                if "messages" in body:
                    text = self.render(body["messages"], bool(body.get("add_generation_prompt", True)))
                    ids = self.encode(text)
                elif isinstance(body.get("prompt"), str):
                    ids = list(
                        self.tokenizer(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", False)))[
                            "input_ids"
                        ]
                    )
                else:
                    raise BadRequest(400, "give 'messages' (a chat) or 'prompt' (a string)")
            except BadRequest as exc:
                return error(exc)
            return {"tokens": ids, "count": len(ids), "max_model_len": self.max_length}

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Any:
            try:
                body, size = await body_of(request)
                session_id = body.get("session_id") or request.headers.get(SESSION_HEADER)
                return await self.complete(body, session_id, size)
            except BadRequest as exc:
                return error(exc)

        return app

    def render(self, messages: Any, add_generation_prompt: bool) -> str:
        if not isinstance(messages, list) or not messages:
            raise BadRequest(400, "'messages' must be a non-empty list of {role, content} objects")
        clean = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest(400, f"messages[{i}] must be an object with a string 'role'")
            clean.append({**m, "content": _text_content(m.get("content"), i)})
        try:
            return self.tokenizer.apply_chat_template(
                clean, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except Exception as exc:
            raise BadRequest(400, f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        # The rendered template carries its own special tokens: add none (as the data pipeline does).
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _sampling_for(self, body: dict) -> tuple[SamplingSpec, int]:
        if body.get("n", 1) != 1:
            raise BadRequest(400, "only n=1 is supported (run one session per sample)")
        spec = self.sampling
        changes: dict[str, Any] = {"n": 1}
        stop = body.get("stop")
        if stop:
            changes["stop"] = tuple([stop] if isinstance(stop, str) else stop)
        if self.honor_request_sampling:
            for ours, theirs in (
                ("temperature", "temperature"),
                ("top_p", "top_p"),
                ("top_k", "top_k"),
                ("seed", "seed"),
            ):
                if body.get(theirs) is not None:
                    changes[ours] = body[theirs]
        asked = body.get("max_completion_tokens") or body.get("max_tokens") or spec.max_new_tokens
        if not isinstance(asked, int) or asked < 1:
            raise BadRequest(400, f"max_tokens must be a positive integer, got {asked!r}")
        return replace(spec, **changes), asked

    async def complete(self, body: dict, session_id: str | None, size: int = 0) -> dict:
        """One chat completion (the handler of /v1/chat/completions, callable without HTTP); ``size``: the body's
        bytes (a large one is rendered and tokenised in a thread)."""
        session = None
        if session_id:
            try:
                session = self.sessions.get(str(session_id))
            except SessionError as exc:
                raise BadRequest(404, exc.args[0], "session_not_found") from None
            if session.busy:
                raise BadRequest(
                    409,
                    f"session {session_id} already has a call in flight; a session's calls must come one after another",
                    "session_busy",
                )
        messages = body.get("messages")
        if isinstance(messages, list) and len(messages) > self.max_messages:
            raise BadRequest(
                413,
                f"the request has {len(messages)} messages; this server takes at most {self.max_messages} "
                "(max_messages)",
                "request_too_large",
            )
        spec, asked = self._sampling_for(body)
        if not self.admission.try_admit(1):
            raise BadRequest(
                503,
                f"the server holds {self.admission.held} calls already (max_queue={self.admission.capacity}); retry "
                f"after {self.admission.retry_after_s()} s",
                "server_busy",
                self.admission.retry_headers(),
            )
        started = time.monotonic()
        if session is not None:
            session.busy = True  # before the first await: a second call of this session is refused meanwhile
        try:
            return await self._complete(body, session, session_id, messages, spec, asked, size)
        finally:
            if session is not None:
                session.busy = False
            self.admission.release(1)
            self.admission.completed(1, time.monotonic() - started)

    async def _complete(
        self,
        body: dict,
        session: Session | None,
        session_id: Any,
        messages: Any,
        spec: SamplingSpec,
        asked: int,
        size: int,
    ) -> dict:
        def prompt() -> tuple[str, list[int]]:
            rendered = self.render(messages, add_generation_prompt=True)
            try:
                return rendered, session.prompt_ids(rendered, self.encode) if session else self.encode(rendered)
            except PrefixError as exc:
                raise BadRequest(400, str(exc), "prefix_mismatch") from None

        # A large prompt is rendered and tokenised in a thread: /health and small calls are answered meanwhile.
        rendered, ids = await asyncio.to_thread(prompt) if size >= OFFLOAD_BYTES else prompt()
        remaining = self.max_length - len(ids)
        if remaining <= 0:
            if session is not None:
                session.truncated = True
            return self._response(body, ids, Rollout(ids, [], [], [], "length"), "", session_id)
        spec = replace(spec, max_new_tokens=min(asked, remaining))
        if self._batcher is None:
            self._batcher = WindowBatcher(self, self._max_wait_s, self._max_batch)
        try:
            out = await asyncio.wait_for(self._batcher.generate(ids, spec), self.call_timeout_s)
        except asyncio.TimeoutError:
            raise BadRequest(504, f"generation did not finish within {self.call_timeout_s:g} s", "timeout") from None
        except RolloutEngineError as exc:
            raise BadRequest(500, str(exc), "engine_error") from None
        completion = list(out.output_ids)
        stop_ids = {self.tokenizer.eos_token_id, *spec.stop_token_ids}
        ends_with_stop = out.finish_reason == "stop" and bool(completion) and completion[-1] in stop_ids
        content = self.tokenizer.decode(completion[:-1] if ends_with_stop else completion, skip_special_tokens=False)
        tail = self.tokenizer.decode(completion[-1:], skip_special_tokens=False) if ends_with_stop else ""
        if session is not None:
            session.record(rendered, CallTrace(ids, completion, list(out.logprobs), out.finish_reason), content + tail)
        self.calls += 1
        return self._response(body, ids, out, content, session_id)

    def _response(self, body: dict, prompt_ids: list[int], out: Rollout, content: str, session_id: Any) -> dict:
        logprobs = None
        if body.get("logprobs"):
            items = []
            for tid, lp in zip(out.output_ids, out.logprobs, strict=True):
                tok = self.tokenizer.decode([tid], skip_special_tokens=False)
                entry = {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}
                items.append({**entry, "token_id": tid, "top_logprobs": [entry]})
            logprobs = {"content": items}
        n_out = len(out.output_ids)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": out.finish_reason,
                    "logprobs": logprobs,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": n_out,
                "total_tokens": len(prompt_ids) + n_out,
            },
            "token_ids": {"prompt_token_ids": list(prompt_ids), "completion_token_ids": list(out.output_ids)},
            "session_id": session_id,
        }


def _text_content(content: Any, index: int) -> str:
    """OpenAI message content (a string, None, or a list of parts) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise BadRequest(400, f"messages[{index}].content: only text parts are supported")
        return "".join(texts)
    raise BadRequest(400, f"messages[{index}].content must be a string or a list of text parts")
