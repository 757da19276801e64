"""Agents written against the standard ``openai`` client: each episode's chat calls become ONE trajectory.

The agent file defines::

    async def run_agent(prompt: str, label, session: AgentSession) -> dict:
        client = session.client()                    # openai.AsyncOpenAI bound to this episode's session
        reply = await client.chat.completions.create(model=session.model,
                                                     messages=[{"role": "user", "content": prompt}])
        ...                                          # more calls: tools, feedback, retries
        return {"reward": 1.0, "scores": 1.0, "extra_logs": {...}}    # scores, extra_logs optional

For each (prompt, label) the executor opens a session on its :class:`OpenAIServer`, runs ``run_agent`` with a
timeout (all episodes in parallel), and stitches the session's calls into one Rollout with one action range per call
(rlhf.agents.sessions.stitch). ``reward`` may be None to leave the reward to the run's reward source.

Clients made by :meth:`AgentSession.client` send the session id in a header, time out after ``call_timeout_s`` and
never retry (a retried call would be recorded twice). A plain client works too: pass
``extra_body=session.extra_body`` (OpenRLHF's ``extra_body={"session_id": ...}``) on every call.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rlhf.agents.base import AgentExecutorBase, expand, gather_episodes
from rlhf.agents.errors import AgentError, AgentProblem, RolloutEngineError
from rlhf.agents.openai_server import SESSION_HEADER, OpenAIServer
from rlhf.agents.results import result_from_rollout, scalar_logs, to_scalar
from rlhf.agents.sampling import SamplingParams
from rlhf.agents.sessions import stitch
from rlhf.backends.contract.rollout import Rollout, SamplingSpec

RunAgent = Callable[[str, Any, "AgentSession"], Awaitable[dict]]


@dataclass
class AgentSession:
    """What ``run_agent`` gets: where the server is and which session the episode's calls belong to."""

    session_id: str
    base_url: str  # ".../v1", for openai.AsyncOpenAI(base_url=...)
    model: str
    sampling: SamplingSpec  # the run's sampling settings (the server applies them)
    max_length: int  # the episode's token budget
    call_timeout_s: float = 300.0
    _clients: list[Any] = field(default_factory=list, repr=False)

    @property
    def extra_body(self) -> dict[str, str]:
        return {"session_id": self.session_id}

    def client(self, **kwargs: Any) -> Any:
        """An ``openai.AsyncOpenAI`` for this session (closed by the executor when the episode ends)."""
        from openai import AsyncOpenAI

        headers = {SESSION_HEADER: self.session_id, **kwargs.pop("default_headers", {})}
        options = {"api_key": "EMPTY", "timeout": self.call_timeout_s, "max_retries": 0, **kwargs}
        client = AsyncOpenAI(base_url=self.base_url, default_headers=headers, **options)
        self._clients.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()
        self._clients.clear()


async def default_run_agent(prompt: str, label: Any, session: AgentSession) -> dict:
    """One chat call with the prompt as the user message; the reward is left to the reward source."""
    await session.client().chat.completions.create(model=session.model, messages=[{"role": "user", "content": prompt}])
    return {"reward": None}


class OpenAIAgentExecutor(AgentExecutorBase):
    """Runs ``run_agent`` episodes through an OpenAI-compatible server over the rollout engine.

    Subclass it and override :meth:`run_agent`, or pass the function. The server starts on first use and keeps
    running across batches until :meth:`close`.
    """

    def __init__(
        self,
        run_agent: RunAgent | None = None,
        *,
        run_timeout_s: float = 900.0,
        call_timeout_s: float = 300.0,
        max_concurrency: int = 512,
        server_options: dict[str, Any] | None = None,
    ) -> None:
        if run_agent is not None and not inspect.iscoroutinefunction(run_agent):
            raise AgentError(f"run_agent must be an 'async def' function; got {run_agent!r}")
        self._run_agent = run_agent
        self.run_timeout_s = run_timeout_s
        self.call_timeout_s = call_timeout_s
        self.max_concurrency = max_concurrency
        self.server_options = dict(server_options or {})
        self.server: OpenAIServer | None = None

    async def run_agent(self, prompt: str, label: Any, session: AgentSession) -> dict:
        return await (self._run_agent or default_run_agent)(prompt, label, session)

    def ensure_server(self, engine: Any, tokenizer: Any, sampling: SamplingSpec, max_length: int) -> OpenAIServer:
        """The running server, serving ``engine`` with these settings (started on first use)."""
        if self.server is None:
            self.server = OpenAIServer(engine, tokenizer, call_timeout_s=self.call_timeout_s, **self.server_options)
        server = self.server
        server.engine, server.tokenizer = engine, tokenizer
        server.sampling = replace(sampling, n=1)
        server.max_length = max_length
        server.start()
        return server

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    async def run_batch(
        self,
        engine: Any,
        tokenizer: Any,
        prompts: Sequence[str],
        labels: Sequence[Any],
        sampling: SamplingSpec,
        max_length: int,
        prompt_ids: Sequence[Sequence[int]] | None = None,
    ) -> list[Rollout]:
        """``sampling.n`` episodes per prompt (prompt-major) -> one stitched Rollout each.

        ``prompts`` are what ``run_agent`` receives (usually raw user text: the server applies the chat template to
        the messages the agent sends); ``prompt_ids`` are not used.
        """
        server = self.ensure_server(engine, tokenizer, sampling, max_length)
        limit = asyncio.Semaphore(self.max_concurrency)
        batch_id = uuid.uuid4().hex[:12]

        async def one(index: int, prompt: str, label: Any) -> Rollout:
            async with limit:
                return await self._episode(server, f"{batch_id}-{index}", index, prompt, label, max_length)

        episodes = expand(prompts, labels, None, sampling.n)
        return await gather_episodes([one(i, p, lab) for i, (p, lab, _) in enumerate(episodes)])

    async def _episode(
        self, server: OpenAIServer, session_id: str, index: int, prompt: str, label: Any, max_length: int
    ) -> Rollout:
        server.open_session(session_id)
        session = AgentSession(
            session_id, server.base_url, server.model_name, server.sampling, max_length, self.call_timeout_s
        )
        try:
            try:
                result = await asyncio.wait_for(self.run_agent(prompt, label, session), self.run_timeout_s)
            except asyncio.TimeoutError:
                raise AgentProblem(f"run_agent did not finish within {self.run_timeout_s:g} s") from None
            except (AgentProblem, AgentError, RolloutEngineError):
                raise
            except Exception as exc:
                raise AgentProblem(f"run_agent raised {type(exc).__name__}: {exc}") from exc
            state = server.close_session(session_id)
            if state is None or not state.traces:
                raise AgentProblem(
                    "run_agent made no chat call with its session (use session.client(), or pass "
                    "extra_body=session.extra_body)"
                )
            rollout = stitch(state)
            reward, scores, logs = _check_result(result)
            rollout.reward = reward
            rollout.scores = scores if scores is not None else reward
            rollout.extra["extra_logs"] = logs
            return rollout
        except AgentProblem as exc:
            raise AgentError(str(exc), agent=self.agent_path, sample=index, prompt=prompt) from exc
        finally:
            server.close_session(session_id)
            await session.aclose()

    async def execute(
        self,
        prompt: str,
        label: Any,
        sampling_params: SamplingParams,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        **kwargs: Any,
    ) -> dict:
        """One episode, OpenRLHF's way (``llm_engine`` must be a synchronous rollout engine)."""
        spec = sampling_params.to_spec(sampling_params.max_tokens or max_length)
        server = self.ensure_server(llm_engine, hf_tokenizer, spec, max_length)
        rollout = await self._episode(server, uuid.uuid4().hex, 0, prompt, label, max_length)
        return result_from_rollout(rollout, prompt, label)


def _check_result(result: Any) -> tuple[float | None, float | None, dict[str, float]]:
    if result is None:
        return None, None, {}
    if not isinstance(result, dict):
        raise AgentProblem(
            f"run_agent must return a dict with 'reward' (and optional 'scores', 'extra_logs'); got "
            f"{type(result).__name__}"
        )
    reward = result.get("reward")
    scores = result.get("scores")
    return (
        None if reward is None else to_scalar(reward, "run_agent()['reward']"),
        None if scores is None else to_scalar(scores, "run_agent()['scores']"),
        scalar_logs(result.get("extra_logs"), "run_agent()['extra_logs']"),
    )
