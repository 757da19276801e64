"""Misbehaving agents fail with an AgentError that names the agent file, the sample and the problem; no hangs."""

from __future__ import annotations

import time

import pytest
from agent_helpers import FakeEngine

from rlhf.agents import AgentError, RolloutEngineError, load_agent
from rlhf.backends.contract.rollout import SamplingSpec

SPEC = SamplingSpec(max_new_tokens=2)


def run(path, tokenizer, prompts=("q", "w"), max_length=64, **kwargs):
    engine = FakeEngine(lambda p: tokenizer.convert_tokens_to_ids(["a", "<|end|>"]))
    agent = load_agent(path, "multi_turn", **kwargs)
    return agent.run(engine, tokenizer, list(prompts), ["x", "y"][: len(prompts)], SPEC, max_length)


AGENT = """
from rlhf.agents import AgentInstanceBase

class AgentInstance(AgentInstanceBase):
    def __init__(self):
        pass

    async def step(self, states, **kwargs):
        if states["label"] == "y":
            {bad}
        return {{"rewards": 0.0, "environment_feedback": "", "done": True}}
"""


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("raise ValueError('boom')", "step() raised ValueError: boom"),
        ("return {'rewards': 1.0, 'environment_feedback': ''}", "step() returned a dict without ['done']"),
        ("return {'rewards': 'high', 'environment_feedback': '', 'done': True}", "step()['rewards'] must be a number"),
        ("return {'rewards': 1.0, 'environment_feedback': 3, 'done': True}", "'environment_feedback'] must be a str"),
        ("return {'rewards': 1.0, 'environment_feedback': '', 'done': 'yes'}", "step()['done'] must be a bool"),
        ("return [1.0, '', True]", "step() must return a dict"),
        (
            "return {'rewards': 1.0, 'environment_feedback': '', 'done': False, 'sampling_params': 3}",
            "sampling_params of type int",
        ),
    ],
)
def test_bad_step_is_reported_with_file_sample_and_problem(tokenizer, write_agent, bad, message):
    path = write_agent(AGENT.format(bad=bad))
    with pytest.raises(AgentError) as err:
        run(path, tokenizer)
    assert f"agent file {path}" in str(err.value)
    assert "sample 1 (prompt 'w')" in str(err.value)
    assert message in str(err.value)


def test_agent_that_never_says_done_stops_at_max_turns(tokenizer, write_agent):
    path = write_agent(
        """
        from rlhf.agents import AgentInstanceBase

        class AgentInstance(AgentInstanceBase):
            async def step(self, states, **kwargs):
                return {"rewards": 0.0, "environment_feedback": "", "done": False}
        """
    )
    with pytest.raises(AgentError, match=r"sample 0 .*did not return done=True within 3 turns \(agent.max_turns\)"):
        run(path, tokenizer, max_turns=3)


def test_step_that_hangs_times_out(tokenizer, write_agent):
    path = write_agent(
        """
        import asyncio
        from rlhf.agents import AgentInstanceBase

        class AgentInstance(AgentInstanceBase):
            async def step(self, states, **kwargs):
                await asyncio.sleep(60)
        """
    )
    start = time.monotonic()
    with pytest.raises(AgentError, match=r"step\(\) did not return within 0.2 s"):
        run(path, tokenizer, step_timeout_s=0.2)
    assert time.monotonic() - start < 5


def test_async_constructor_is_named(tokenizer, write_agent):
    path = write_agent(
        """
        from rlhf.agents import AgentInstanceBase

        class AgentInstance(AgentInstanceBase):
            async def __init__(self):
                pass

            async def step(self, states, **kwargs):
                return {}
        """
    )
    with pytest.raises(AgentError, match=r"AgentInstance.__init__ is 'async def'"):
        run(path, tokenizer, prompts=["q"])


def test_engine_failure_is_not_blamed_on_the_agent(tokenizer, write_agent):
    path = write_agent(AGENT.format(bad="pass"))

    class Broken(FakeEngine):
        def generate(self, prompts, sampling):
            raise RuntimeError("device lost")

    agent = load_agent(path, "multi_turn")
    with pytest.raises(RolloutEngineError, match="device lost"):
        agent.run(Broken(lambda p: []), tokenizer, ["q"], ["x"], SPEC, 64)
