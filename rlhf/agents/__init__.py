"""Agents: OpenRLHF-compatible environments (reset/step), executors that turn episodes into token-exact Rollouts,
and an OpenAI-compatible server for agents written against the ``openai`` client.

The RL loop's entry points::

    executor = build_executor(spec.agent)               # or load_agent(path, "multi_turn" | "openai" | "auto")
    rollouts = executor.run(engine, tokenizer, prompts, labels, sampling, max_length, prompt_ids=None)
    # (await executor.run_batch(...) from async code); one Rollout per episode, prompt-major
    executor.close()                                    # stops the OpenAI server, if one was started

An OpenRLHF agent file runs unchanged: its ``from openrlhf.utils.agent import ...`` resolves to these classes when no
real ``openrlhf`` is installed (rlhf.compat.openrlhf).
"""

from __future__ import annotations

from typing import Any

from rlhf.agents.base import AgentExecutorBase, AgentInstanceBase, EpisodeEngine, RequestOutput
from rlhf.agents.errors import AgentError, RolloutEngineError
from rlhf.agents.loader import build_executor, load_agent, load_agent_module
from rlhf.agents.multi_turn import MultiTurnAgentExecutor
from rlhf.agents.sampling import SamplingParams
from rlhf.agents.single_turn import SingleTurnAgentExecutor

# The OpenAI parts import fastapi/uvicorn/openai: loaded on first use.
_LAZY = {
    "OpenAIAgentExecutor": "rlhf.agents.openai_executor",
    "AgentSession": "rlhf.agents.openai_executor",
    "OpenAIServer": "rlhf.agents.openai_server",
}

__all__ = [
    "AgentError",
    "AgentExecutorBase",
    "AgentInstanceBase",
    "AgentSession",
    "EpisodeEngine",
    "MultiTurnAgentExecutor",
    "OpenAIAgentExecutor",
    "OpenAIServer",
    "RequestOutput",
    "RolloutEngineError",
    "SamplingParams",
    "SingleTurnAgentExecutor",
    "build_executor",
    "load_agent",
    "load_agent_module",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlhf.agents' has no attribute {name!r}")
