"""The OpenAI-compatible server's limits over real HTTP on 127.0.0.1: 413 naming the limit for a body or a message
list too large, 503 with Retry-After once ``max_queue`` calls are held, and /health answered while the engine is busy
and while a large prompt is tokenised. "While" is made certain, not raced: the engine (or the tokenizer) is held at a
gate the test opens only after /health has answered, which it could not do if it waited behind them."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from agent_helpers import FakeEngine
from ceilings import ceiling, wait_until

from rlhf.agents import OpenAIServer


def call(url: str, body: dict | bytes, timeout: float = 60) -> tuple[int, dict, dict]:
    timeout = ceiling(timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), {k.lower(): v for k, v in e.headers.items()}


def health(url: str) -> None:
    """/health answers ok (urlopen's ceiling only bounds a hang)."""
    with urllib.request.urlopen(f"{url}/health", timeout=ceiling(30)) as r:
        assert json.loads(r.read())["status"] == "ok"


def chat(content: str) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 2}


class GatedEngine(FakeEngine):
    """Generates only once ``gate`` is set: the calls it holds stay in flight as long as the test wants."""

    def __init__(self, reply) -> None:
        super().__init__(reply)
        self.gate, self.entered = threading.Event(), threading.Event()

    def generate(self, prompts, sampling):
        self.entered.set()
        assert self.gate.wait(ceiling(120)), "the test never opened the gate"
        return super().generate(prompts, sampling)


class GatedTokenizer:
    """The real tokenizer, except that rendering a prompt longer than ``big`` characters waits at ``gate``."""

    def __init__(self, tokenizer, big: int) -> None:
        self._tokenizer, self._big = tokenizer, big
        self.gate, self.entered = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, messages, *args, **kwargs):
        if sum(len(str(m.get("content", ""))) for m in messages) > self._big:
            self.entered.set()
            assert self.gate.wait(ceiling(120)), "the test never opened the gate"
        return self._tokenizer.apply_chat_template(messages, *args, **kwargs)


def end_token(tokenizer):
    return lambda p: [tokenizer.eos_token_id]


def test_a_body_or_a_message_list_over_the_limit_gets_413_naming_it(tokenizer):
    engine = FakeEngine(end_token(tokenizer))
    with OpenAIServer(engine, tokenizer, max_length=64, max_body_bytes=4096, max_messages=3) as server:
        status, body, _ = call(server.url, chat("x" * 5000))
        assert status == 413 and body["error"]["type"] == "request_too_large"
        assert "at most 4096 bytes per request (max_body_bytes)" in body["error"]["message"]
        many = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}] * 4}
        status, body, _ = call(server.url, many)
        assert status == 413 and "4 messages" in body["error"]["message"] and "at most 3 (max_messages)" in str(body)
        assert call(server.url, chat("fits"))[0] == 200 and engine.calls


def test_a_full_queue_gets_503_with_retry_after_and_health_is_answered_meanwhile(tokenizer):
    engine = GatedEngine(end_token(tokenizer))
    with OpenAIServer(engine, tokenizer, max_length=64, max_queue=2) as server:
        held = [threading.Thread(target=call, args=(server.url, chat(f"held {i}")), daemon=True) for i in range(2)]
        for t in held:
            t.start()
        assert engine.entered.wait(ceiling(30))
        wait_until(lambda: server.admission.held == 2, "the two calls admitted", 30)
        status, body, headers = call(server.url, chat("one too many"))
        for _ in range(5):
            health(server.url)  # answered while both calls are held at the engine's closed gate
        engine.gate.set()
        for t in held:
            t.join(ceiling(30))
        assert status == 503 and body["error"]["type"] == "server_busy" and "max_queue=2" in body["error"]["message"]
        assert int(headers["retry-after"]) >= 1
        assert server.admission.held == 0 and call(server.url, chat("after"))[0] == 200


def test_health_is_answered_while_a_large_prompt_is_tokenised(tokenizer):
    engine = FakeEngine(end_token(tokenizer))
    gated = GatedTokenizer(tokenizer, big=100_000)
    with OpenAIServer(engine, gated, max_length=64) as server:
        done: dict = {}
        big = threading.Thread(target=lambda: done.update(r=call(server.url, chat("word " * 200_000))), daemon=True)
        big.start()  # 1 MB of text: rendered and tokenised off the event loop
        assert gated.entered.wait(ceiling(60)), "the large prompt never reached the tokenizer"
        for _ in range(5):
            health(server.url)  # answered while the large prompt's rendering waits at the closed gate
        gated.gate.set()
        big.join(ceiling(120))
        assert done["r"][0] == 200 and done["r"][1]["choices"][0]["finish_reason"] == "length"  # over max_length


def test_a_long_prompt_gets_an_engine_call_of_its_own_after_the_short_ones(tokenizer):
    import asyncio

    from rlhf.agents.batching import WindowBatcher
    from rlhf.backends.contract.rollout import SamplingSpec

    engine = FakeEngine(end_token(tokenizer))
    batcher = WindowBatcher(engine, max_wait_s=0.01)
    prompts = [[5] * 900, [5] * 20, [5] * 30, [5] * 60]  # 60 <= 2 * 20 + 32: one bucket with 20 and 30

    async def all_at_once():
        return await asyncio.gather(*(batcher.generate(p, SamplingSpec(max_new_tokens=2)) for p in prompts))

    outs = asyncio.run(all_at_once())
    assert [len(o.prompt_ids) for o in outs] == [900, 20, 30, 60]  # each caller gets its own answer
    assert [sorted(len(p) for p in call) for call, _ in engine.calls] == [[20, 30, 60], [900]]
