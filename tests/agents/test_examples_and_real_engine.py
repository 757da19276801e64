"""The example agents, scripted and on a real engine: HFEngine over a tiny random Llama, the OpenAI agent through
real HTTP on 127.0.0.1 with the openai client. With a real engine the trainer's recomputed log-probs must match the
rollout's at every action token (the tokens are exactly those sampled) and be absent (0, masked) elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import FakeEngine, recomputed_logprobs

from rlhf.agents import load_agent
from rlhf.backends.contract.rollout import SamplingSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"
ARITH = str(EXAMPLES / "arith_env.py")
CALCULATOR = str(EXAMPLES / "calculator_openai.py")


def chat(tokenizer, text: str) -> str:
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def scripted(tokenizer, *replies: str) -> FakeEngine:
    """Replies in turn (by how many assistant turns the prompt already holds), each ending with <|end|>."""
    assistant = tokenizer.convert_tokens_to_ids("<|assistant|>")

    def reply(prompt: list[int]) -> list[int]:
        text = replies[min(prompt.count(assistant) - 1, len(replies) - 1)]
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    return FakeEngine(reply)


def test_arith_env_gives_feedback_and_pays_by_attempt(tokenizer):
    agent = load_agent(ARITH, "multi_turn")
    engine = scripted(tokenizer, "5", "7")
    [r] = agent.run(engine, tokenizer, [chat(tokenizer, "3+4=")], ["7"], SamplingSpec(max_new_tokens=4), 128)
    assert r.reward == 0.5 and r.scores == 1.0 and r.extra["turns"] == 2
    text = tokenizer.decode(r.output_ids)
    assert text == "5<|end|>\n<|user|>\nwrong, try again<|end|>\n<|assistant|>\n7<|end|>"


def test_calculator_agent_uses_the_tool_result_in_a_follow_up_call(tokenizer):
    agent = load_agent(CALCULATOR, "openai")
    engine = scripted(tokenizer, "calc(6*7)", "42")
    try:
        [r] = agent.run(engine, tokenizer, ["6*7="], ["42"], SamplingSpec(max_new_tokens=16), 256)
    finally:
        agent.close()
    assert (r.reward, r.scores, r.extra["turns"]) == (1.0, 1.0, 2)
    assert r.extra["extra_logs"] == {"tool_calls": 1.0, "correct": 1.0}
    assert "<|user|>\ncalc: 42<|end|>" in tokenizer.decode(r.output_ids)


def assert_token_exact(engine, rollouts, max_length: int) -> None:
    for r in rollouts:
        assert len(r.prompt_ids) + len(r.output_ids) <= max_length
        recomputed = recomputed_logprobs(engine.model, r.prompt_ids, r.output_ids)
        for mask, ours, theirs in zip(r.action_mask, r.logprobs, recomputed, strict=True):
            if mask:
                assert ours == pytest.approx(theirs, abs=2e-3)
            else:
                assert ours == 0.0


def test_arith_env_on_a_real_engine_is_token_exact(tokenizer, tiny_hf_engine):
    agent = load_agent(ARITH, "multi_turn")
    prompts = [chat(tokenizer, q) for q in ("1+2=", "3+4=", "2+2=")]
    sampling = SamplingSpec(max_new_tokens=6, seed=3)
    out = agent.run(tiny_hf_engine, tokenizer, prompts, ["3", "7", "4"], sampling, 48)
    assert len(out) == 3
    assert_token_exact(tiny_hf_engine, out, 48)
    feedback = tokenizer("\n<|user|>\nwrong, try again<|end|>\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
    for r in out:
        assert r.extra["turns"] >= 2  # a random model does not answer right at once
        assert any(r.output_ids[i : i + len(feedback)] == feedback for i in range(len(r.output_ids)))


def test_openai_agent_on_a_real_engine_over_http_is_token_exact(tokenizer, tiny_hf_engine, write_agent):
    path = write_agent(
        """
        async def run_agent(prompt, label, session):
            client = session.client()
            messages = [{"role": "user", "content": prompt}]
            for turn in range(2):
                reply = await client.chat.completions.create(model=session.model, messages=messages, max_tokens=5)
                messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                             {"role": "user", "content": "calc: 12"}]
            return {"reward": float(label)}
        """
    )
    agent = load_agent(path, "openai")
    try:
        out = agent.run(tiny_hf_engine, tokenizer, ["6*2=", "3*4="], ["1", "0"], SamplingSpec(max_new_tokens=8), 96)
    finally:
        agent.close()
    assert [r.reward for r in out] == [1.0, 0.0]
    assert_token_exact(tiny_hf_engine, out, 96)
    for r in out:
        assert (
            r.prompt_ids
            == tokenizer(chat(tokenizer, "6*2=" if r.reward else "3*4="), add_special_tokens=False)["input_ids"]
        )
        starts = [i for i, m in enumerate(r.action_mask) if m and (i == 0 or not r.action_mask[i - 1])]
        assert len(starts) == r.extra["turns"] == 2
