"""The OpenAI-compatible server and executor over real HTTP on 127.0.0.1 with the real ``openai`` client."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import openai
import pytest
from agent_helpers import FakeEngine
from ceilings import ceiling, wait_until

from rlhf.agents import AgentError, OpenAIAgentExecutor, OpenAIServer
from rlhf.backends.contract.rollout import SamplingSpec


def toks(tokenizer, *tokens: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(list(tokens))


def enc(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=ceiling(10)) as r:
        return json.loads(r.read())


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=ceiling(10)) as r:
        return json.loads(r.read())


@pytest.fixture
def reply_ab_end(tokenizer):
    # "a", "b" is a non-canonical split of "ab": the session must keep these ids, not re-encode the text.
    return FakeEngine(lambda p: toks(tokenizer, "a", "b", "<|end|>"))


def test_health_models_tokenize_and_a_stateless_completion(tokenizer, reply_ab_end):
    with OpenAIServer(reply_ab_end, tokenizer, model_name="tiny", max_length=64) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        assert get(f"{server.url}/health")["status"] == "ok"
        assert get(f"{server.base_url}/models")["data"][0]["id"] == "tiny"
        messages = [{"role": "user", "content": "hi"}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        tokenized = post(f"{server.url}/tokenize", {"messages": messages})
        assert tokenized["tokens"] == enc(tokenizer, rendered) and tokenized["max_model_len"] == 64

        async def call():
            async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
                return await client.chat.completions.create(model="tiny", messages=messages, logprobs=True)

        reply = asyncio.run(call())
    choice = reply.choices[0]
    assert choice.message.content == "ab" and choice.finish_reason == "stop"
    assert [c.logprob for c in choice.logprobs.content] == [-0.01, -0.02, -0.03]
    assert reply.token_ids == {
        "prompt_token_ids": enc(tokenizer, rendered),
        "completion_token_ids": toks(tokenizer, "a", "b", "<|end|>"),
    }
    assert len(server.sessions) == 0  # stateless calls are not recorded


def test_session_calls_are_stitched_into_one_rollout_with_one_action_range_per_call(tokenizer, reply_ab_end):
    seen = {}

    async def run_agent(prompt, label, session):
        client = session.client()
        messages = [{"role": "user", "content": prompt}]
        first = await client.chat.completions.create(model=session.model, messages=messages)
        messages += [{"role": "assistant", "content": first.choices[0].message.content}]
        messages += [{"role": "user", "content": "ok"}]
        second = await client.chat.completions.create(model=session.model, messages=messages)
        seen["second_prompt"] = second.token_ids["prompt_token_ids"]
        return {"reward": 0.5, "extra_logs": {"calls": 2}}

    agent = OpenAIAgentExecutor(run_agent)
    try:
        [r] = agent.run(reply_ab_end, tokenizer, ["12"], ["3"], SamplingSpec(max_new_tokens=8), 128)
    finally:
        agent.close()
    first_prompt = enc(tokenizer, "<|user|>\n12<|end|>\n<|assistant|>\n")
    completion = toks(tokenizer, "a", "b", "<|end|>")
    between = enc(tokenizer, "\n<|user|>\nok<|end|>\n<|assistant|>\n")  # only the new suffix was tokenised
    assert r.prompt_ids == first_prompt
    assert r.output_ids == completion + between + completion
    assert seen["second_prompt"] == first_prompt + completion + between
    assert r.action_mask == [1] * 3 + [0] * len(between) + [1] * 3
    assert r.logprobs == [-0.01, -0.02, -0.03] + [0.0] * len(between) + [-0.01, -0.02, -0.03]
    assert (r.reward, r.scores, r.finish_reason) == (0.5, 0.5, "stop")
    assert r.extra["extra_logs"] == {"calls": 2.0} and r.extra["turns"] == 2
    # re-encoding the conversation text would have merged "a" "b" into "ab"
    assert enc(tokenizer, tokenizer.decode(r.prompt_ids + r.output_ids)) != r.prompt_ids + r.output_ids


class _FirstCallWaitsForTheRest(FakeEngine):
    """Its first call returns only once every session's call is in it or waits in the server's batcher for the next
    one: the batching then meets all of them, whatever the machine's speed (rather than however many calls a timing
    window happened to catch)."""

    def __init__(self, reply, agent, sessions: int) -> None:
        super().__init__(reply)
        self.agent, self.sessions = agent, sessions

    def generate(self, prompts, sampling):
        if not self.calls:
            here = len(prompts)
            wait_until(lambda: here + self.agent.server.waiting >= self.sessions, "every session's call arrived", 60)
        return super().generate(prompts, sampling)


def test_concurrent_sessions_share_engine_calls(tokenizer):
    async def run_agent(prompt, label, session):
        await session.client().chat.completions.create(
            model=session.model, messages=[{"role": "user", "content": prompt}]
        )
        return {"reward": 1.0}

    agent = OpenAIAgentExecutor(run_agent)
    engine = _FirstCallWaitsForTheRest(lambda p: toks(tokenizer, "<|end|>"), agent, sessions=8)
    try:
        out = agent.run(engine, tokenizer, ["q"] * 8, [""] * 8, SamplingSpec(max_new_tokens=2), 64)
    finally:
        agent.close()
    assert len(out) == 8 and all(r.output_ids == toks(tokenizer, "<|end|>") for r in out)
    assert len(engine.calls) <= 2  # the first call, then every call that waited for it, together
    assert sum(len(c[0]) for c in engine.calls) == 8


def test_changed_history_is_an_agent_error_naming_the_sample_and_the_divergence(tokenizer, reply_ab_end):
    async def run_agent(prompt, label, session):
        client = session.client()
        messages = [{"role": "user", "content": prompt}]
        await client.chat.completions.create(model=session.model, messages=messages)
        messages += [{"role": "assistant", "content": "something else"}, {"role": "user", "content": "ok"}]
        await client.chat.completions.create(model=session.model, messages=messages)
        return {"reward": 0.0}

    agent = OpenAIAgentExecutor(run_agent).configure(agent_path="calc.py")
    try:
        with pytest.raises(AgentError) as err:
            agent.run(reply_ab_end, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=8), 128)
    finally:
        agent.close()
    message = str(err.value)
    assert message.startswith("agent file calc.py, sample 0 (prompt 'q'): run_agent raised BadRequestError")
    assert "does not extend the previous call's prompt + completion" in message
    assert "'ab<|end|>'" in message and "'something else" in message


class _NeverAnswers(FakeEngine):
    """Generates only after the test ends: a call to it can only end by its timeout."""

    def __init__(self, reply) -> None:
        super().__init__(reply)
        self.released = threading.Event()

    def generate(self, prompts, sampling):
        self.released.wait(ceiling(300))
        return super().generate(prompts, sampling)


def test_a_call_that_times_out_is_an_agent_error_not_a_hang(tokenizer):
    engine = _NeverAnswers(lambda p: toks(tokenizer, "<|end|>"))
    agent = OpenAIAgentExecutor(call_timeout_s=0.3)
    try:
        with pytest.raises(
            AgentError, match=r"sample 0 .*run_agent raised .*(generation did not finish within 0.3 s|APITimeoutError)"
        ):
            agent.run(engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=2), 64)
    finally:
        engine.released.set()
        agent.close()


def test_spent_budget_answers_length_and_keeps_the_rollout_within_it(tokenizer):
    engine = FakeEngine(lambda p: toks(tokenizer, *"xyzxyz"))
    replies = []

    async def run_agent(prompt, label, session):
        client = session.client()
        messages = [{"role": "user", "content": prompt}]
        for _ in range(3):
            reply = await client.chat.completions.create(model=session.model, messages=messages)
            replies.append(reply.choices[0])
            messages += [{"role": "assistant", "content": reply.choices[0].message.content}]
            messages += [{"role": "user", "content": "more"}]
        return {"reward": 0.0}

    agent = OpenAIAgentExecutor(run_agent)
    try:
        [r] = agent.run(engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=6), 24)
    finally:
        agent.close()
    assert len(r.prompt_ids) + len(r.output_ids) <= 24
    assert [c.finish_reason for c in replies][-1] == "length" and replies[-1].message.content == ""
    assert r.finish_reason == "length"


def test_unknown_session_and_agent_without_calls_are_reported(tokenizer, reply_ab_end):
    async def no_calls(prompt, label, session):
        return {"reward": 1.0}

    agent = OpenAIAgentExecutor(no_calls)
    try:
        with pytest.raises(AgentError, match="run_agent made no chat call with its session"):
            agent.run(reply_ab_end, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=2), 64)
        server = agent.server

        async def stray():
            async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "q"}], extra_body={"session_id": "nope"}
                )

        with pytest.raises(openai.NotFoundError, match="unknown session_id 'nope'"):
            asyncio.run(stray())
    finally:
        agent.close()
