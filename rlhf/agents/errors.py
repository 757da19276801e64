"""Errors of agent execution.

:class:`AgentError` is the user's to fix (their agent file misbehaved): its message names the agent file, the sample
and the problem. :class:`AgentProblem` is raised deep inside an episode, where the sample is not known; the executor
that runs the batch turns it into an :class:`AgentError` with the sample filled in. :class:`RolloutEngineError` marks
a failure of the rollout engine itself, which is not the agent's fault and is re-raised unchanged.
"""

from __future__ import annotations

from rlhf.errors import UserError


class AgentError(UserError):
    """An agent file misbehaved (raised, returned a malformed dict, never finished, timed out)."""

    def __init__(self, problem: str, *, agent: str | None = None, sample: int | None = None, prompt: str | None = None):
        self.problem = problem
        self.agent = agent
        self.sample = sample
        where = []
        if agent:
            where.append(f"agent file {agent}")
        if sample is not None:
            where.append(f"sample {sample}" + (f" (prompt {_snippet(prompt)})" if prompt is not None else ""))
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)


class AgentProblem(Exception):
    """What went wrong in one episode, before the executor knows which sample it was."""


class RolloutEngineError(RuntimeError):
    """The rollout engine failed while serving agent episodes (not the agent's fault)."""


def _snippet(text: str, limit: int = 60) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")
