"""Loading an agent file (``agent.path``) into an executor.

What a file may define, by ``agent.executor``:

    multi_turn  ``class AgentExecutor`` (an AgentExecutorBase subclass constructed with no arguments, OpenRLHF's
                ``class AgentExecutor(MultiTurnAgentExecutor): def __init__(self): super().__init__(AgentInstance)``)
                or a bare ``class AgentInstance`` (wrapped in MultiTurnAgentExecutor)
    openai      ``async def run_agent(prompt, label, session)`` or ``class AgentExecutor(OpenAIAgentExecutor)``
    auto        whichever of the above the file has (AgentExecutor first, then AgentInstance, then run_agent)

An OpenRLHF file runs as it is: ``from openrlhf.utils.agent import ...`` resolves to rlhf.agents through
rlhf.compat.openrlhf when no real OpenRLHF is installed (``from rlhf.agents import ...`` works too).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rlhf.agents.base import AgentExecutorBase
from rlhf.agents.errors import AgentError
from rlhf.agents.multi_turn import MultiTurnAgentExecutor
from rlhf.agents.single_turn import SingleTurnAgentExecutor
from rlhf.compat import openrlhf as openrlhf_compat

EXECUTORS = ("multi_turn", "openai", "auto")  # what an agent file can provide; single_turn needs no file


def load_agent_module(path: str | Path) -> ModuleType:
    """Import the file at ``path`` as a module (registered in sys.modules under a name unique to the path)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise AgentError(f"agent.path={str(path)!r}: no such file" + (" (it is a directory)" if file.is_dir() else ""))
    resolved = file.resolve()
    name = f"rlhf_agent_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise AgentError(f"agent.path={str(path)!r}: not a python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and typing look the module up by name
    openrlhf_compat.install()  # OpenRLHF agent files import openrlhf.utils.agent
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise AgentError(f"agent file {path}: importing it raised {type(exc).__name__}: {exc}") from exc
    return module


def load_agent(
    path: str | Path,
    executor: str = "auto",
    *,
    max_turns: int = 8,
    step_timeout_s: float | None = None,
    **openai_options: Any,
) -> AgentExecutorBase:
    """The executor the agent file at ``path`` defines (see the module docstring).

    ``openai_options`` go to :class:`~rlhf.agents.openai_executor.OpenAIAgentExecutor` when the file gives a bare
    ``run_agent`` (run_timeout_s, call_timeout_s, max_concurrency, server_options).
    """
    from rlhf.agents.openai_executor import OpenAIAgentExecutor

    if executor not in EXECUTORS:
        raise AgentError(f"agent.executor={executor!r}: must be one of {', '.join(EXECUTORS)}")
    module = load_agent_module(path)
    executor_cls = _class(module, "AgentExecutor", path)
    instance_cls = _class(module, "AgentInstance", path)
    run_agent = getattr(module, "run_agent", None)
    is_openai_cls = executor_cls is not None and issubclass(executor_cls, OpenAIAgentExecutor)

    if executor_cls is not None and not issubclass(executor_cls, AgentExecutorBase):
        raise AgentError(
            f"agent file {path}: AgentExecutor must subclass rlhf.agents.AgentExecutorBase (e.g. "
            "MultiTurnAgentExecutor or OpenAIAgentExecutor)"
        )
    if executor == "multi_turn" and (executor_cls is None or is_openai_cls) and instance_cls is None:
        raise AgentError(
            f"agent file {path}: agent.executor=multi_turn needs a class AgentInstance (subclassing "
            "rlhf.agents.AgentInstanceBase, with async step()) or a class AgentExecutor"
        )
    if executor == "openai" and not is_openai_cls and run_agent is None:
        raise AgentError(
            f"agent file {path}: agent.executor=openai needs 'async def run_agent(prompt, label, "
            "session)' or a class AgentExecutor(OpenAIAgentExecutor)"
        )
    if executor == "auto" and executor_cls is None and instance_cls is None and run_agent is None:
        raise AgentError(f"agent file {path}: defines none of AgentExecutor, AgentInstance, run_agent")

    if executor_cls is not None and (executor == "auto" or (executor == "openai") == is_openai_cls):
        try:
            agent = executor_cls()
        except TypeError as exc:
            raise AgentError(
                f"agent file {path}: AgentExecutor() must take no arguments ({exc}); OpenRLHF's "
                "current form is 'def __init__(self): super().__init__(AgentInstance)'"
            ) from exc
    elif executor in ("multi_turn", "auto") and instance_cls is not None:
        if not callable(getattr(instance_cls, "step", None)):
            raise AgentError(f"agent file {path}: AgentInstance has no step() method")
        agent = MultiTurnAgentExecutor(instance_cls)
    else:
        if not inspect.iscoroutinefunction(run_agent):
            raise AgentError(f"agent file {path}: run_agent must be 'async def run_agent(prompt, label, session)'")
        agent = OpenAIAgentExecutor(run_agent, **openai_options)
    return agent.configure(agent_path=str(path), max_turns=max_turns, step_timeout_s=step_timeout_s)


def build_executor(agent_spec: Any, **options: Any) -> AgentExecutorBase:
    """The executor for the spec's ``agent`` section (``path``, ``executor``, ``max_turns``)."""
    kind = agent_spec.executor
    if kind == "single_turn":
        if agent_spec.path:
            raise AgentError(
                f"agent.path={agent_spec.path!r} is set but agent.executor=single_turn; set "
                "agent.executor=multi_turn, openai or auto to use the file"
            )
        return SingleTurnAgentExecutor()
    if not agent_spec.path:
        raise AgentError(f"agent.executor={kind}: set agent.path to the agent file")
    return load_agent(agent_spec.path, kind, max_turns=agent_spec.max_turns, **options)


def _class(module: ModuleType, name: str, path: Any) -> type | None:
    value = getattr(module, name, None)
    if value is not None and not isinstance(value, type):
        raise AgentError(f"agent file {path}: {name} must be a class, got {type(value).__name__}")
    return value
