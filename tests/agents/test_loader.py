"""Loading agent files: OpenRLHF files with only the import changed, bare classes, run_agent, clear errors."""

from __future__ import annotations

import pytest
from agent_helpers import FakeEngine

from rlhf.agents import (
    AgentError,
    MultiTurnAgentExecutor,
    OpenAIAgentExecutor,
    SingleTurnAgentExecutor,
    build_executor,
    load_agent,
)
from rlhf.backends.contract.rollout import SamplingSpec
from rlhf.spec.schema import AgentSpec

# OpenRLHF's examples/python/agent_func.py (current API) with the import changed and randomness removed.
OPENRLHF_AGENT = """
from typing import Any, Dict

import torch
from rlhf.agents import AgentInstanceBase, MultiTurnAgentExecutor


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.step_idx = 0
        self.max_steps = 2

    async def reset(self, states: dict, **kwargs):
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs) -> Dict[str, Any]:
        done = self.step_idx >= self.max_steps
        reward = torch.tensor([1.0]) if done else torch.tensor(0)
        environment_feedback = (
            "\\n\\nHuman: [CORRECT]\\n</s>"
            if done
            else "\\n\\nHuman: [INCORRECT]\\nPlease analyze the issues and try again.\\n</s>\\n\\nAssistant: "
        )
        self.step_idx += 1
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": environment_feedback,
            "done": done,
            "sampling_params": states.get("sampling_params", None),
            "extra_logs": {"dummy_scores": reward},
        }


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
"""


def test_openrlhf_agent_file_runs_with_only_the_import_changed(tokenizer, write_agent):
    path = write_agent(OPENRLHF_AGENT)
    agent = load_agent(path, "multi_turn")
    assert isinstance(agent, MultiTurnAgentExecutor) and agent.agent_path == path
    engine = FakeEngine(lambda p: tokenizer.convert_tokens_to_ids(["o", "k", "<|end|>"]))
    [r] = agent.run(engine, tokenizer, ["Q"], ["A"], SamplingSpec(max_new_tokens=4), 256)
    assert r.reward == 1.0 and r.scores == 1.0 and r.extra["turns"] == 3
    assert r.extra["extra_logs"] == {"dummy_scores": 1.0}
    assert sum(r.action_mask) == 9


def test_overridden_execute_calling_super_still_runs(tokenizer, write_agent):
    path = write_agent(
        OPENRLHF_AGENT
        + """

class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine):
        result = await super().execute(prompt + "!", label, sampling_params, max_length, hf_tokenizer, llm_engine)
        result["reward"] = result["reward"] * 10
        return result
"""
    )
    engine = FakeEngine(lambda p: tokenizer.convert_tokens_to_ids(["<|end|>"]))
    [r] = load_agent(path).run(engine, tokenizer, ["Q"], ["A"], SamplingSpec(max_new_tokens=4), 256)
    assert r.reward == 10.0
    assert r.prompt_ids == tokenizer("Q!", add_special_tokens=False)["input_ids"]


def test_bare_agent_instance_and_run_agent_files_pick_their_executor(write_agent):
    instance_file = write_agent(
        """
        class AgentInstance:
            async def step(self, states, **kwargs):
                return {"rewards": 0.0, "environment_feedback": "", "done": True}
        """
    )
    openai_file = write_agent(
        """
        async def run_agent(prompt, label, session):
            return {"reward": 0.0}
        """
    )
    assert isinstance(load_agent(instance_file), MultiTurnAgentExecutor)
    assert isinstance(load_agent(openai_file, "openai"), OpenAIAgentExecutor)
    assert isinstance(load_agent(openai_file), OpenAIAgentExecutor)


def test_build_executor_follows_the_agent_section(write_agent):
    path = write_agent(OPENRLHF_AGENT)
    assert isinstance(build_executor(AgentSpec()), SingleTurnAgentExecutor)
    agent = build_executor(AgentSpec(path=path, executor="multi_turn", max_turns=5))
    assert isinstance(agent, MultiTurnAgentExecutor) and agent.max_turns == 5
    with pytest.raises(AgentError, match="set agent.path"):
        build_executor(AgentSpec(executor="multi_turn"))


@pytest.mark.parametrize(
    ("source", "executor", "message"),
    [
        (None, "multi_turn", "no such file"),
        ("x = 1\n", "auto", "defines none of AgentExecutor, AgentInstance, run_agent"),
        ("x = 1\n", "multi_turn", "agent.executor=multi_turn needs a class AgentInstance"),
        ("class AgentInstance:\n    pass\n", "openai", "agent.executor=openai needs 'async def run_agent"),
        ("def run_agent(prompt, label, session):\n    return {}\n", "openai", "must be 'async def run_agent"),
        ("import no_such_module_xyz\n", "auto", "importing it raised ModuleNotFoundError"),
        ("AgentInstance = 3\n", "auto", "AgentInstance must be a class"),
        (
            "from rlhf.agents import MultiTurnAgentExecutor\n"
            "class AgentExecutor(MultiTurnAgentExecutor):\n"
            "    def __init__(self, max_steps):\n"
            "        pass\n",
            "auto",
            "AgentExecutor() must take no arguments",
        ),
    ],
)
def test_unusable_agent_files_are_named_with_the_fix(tmp_path, source, executor, message):
    path = tmp_path / "my_agent.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(AgentError, match="my_agent.py") as err:
        load_agent(str(path), executor)
    assert message in str(err.value)
