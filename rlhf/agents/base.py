"""The agent protocol (OpenRLHF's ``openrlhf.utils.agent``, same names and semantics) and the batch runner.

A user's agent file subclasses :class:`AgentInstanceBase` (one instance per episode)::

    class AgentInstance(AgentInstanceBase):
        async def reset(self, states, **kwargs):   # states = {"observation": prompt text, "label": label}
            return {"observation": states["observation"]}       # may rewrite the first observation
        async def step(self, states, **kwargs):    # states = {"observation_text", "action_text", "label",
            ...                                    #           "sampling_params"}
            return {"rewards": 1.0, "scores": 1.0, "environment_feedback": "...", "done": True,
                    "sampling_params": None, "extra_logs": {}}

and optionally ``class AgentExecutor(MultiTurnAgentExecutor): def __init__(self): super().__init__(AgentInstance)``.

Executors keep OpenRLHF's per-sample ``execute(prompt, label, sampling_params, max_length, hf_tokenizer,
llm_engine) -> dict``. The platform calls :meth:`AgentExecutorBase.run_batch`, which runs ``execute`` for every
sample concurrently; the ``llm_engine`` it passes is an :class:`EpisodeEngine` whose ``await generate(token_ids,
sampling_params)`` returns a vLLM-style ``RequestOutput`` and is batched across episodes turn by turn.
"""

from __future__ import annotations

import asyncio
import contextvars
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlhf.agents.batching import LockstepBatcher
from rlhf.agents.errors import AgentError, AgentProblem, RolloutEngineError
from rlhf.agents.results import rollout_from_result
from rlhf.agents.sampling import SamplingParams, coerce_sampling_params
from rlhf.backends.contract.rollout import Rollout, SamplingSpec

DEFAULT_STEP_TIMEOUT_S = 300.0


@dataclass
class EpisodeContext:
    """What the runner knows about the episode an ``execute`` call serves (read through :func:`current_episode`)."""

    index: int
    prompt: str
    prompt_ids: list[int] | None = None  # the data pipeline's tokens for ``prompt``, reused when reset keeps it


_EPISODE: contextvars.ContextVar[EpisodeContext | None] = contextvars.ContextVar("rlhf_agent_episode", default=None)


def current_episode() -> EpisodeContext | None:
    return _EPISODE.get()


# -- vLLM-style generate results, for agent code written against OpenRLHF ------------------------------------------


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    rollout: Rollout | None = field(repr=False, default=None)  # ours: the engine's result as it came


class EpisodeEngine:
    """The ``llm_engine`` one episode sees: ``await generate(prompt_token_ids, sampling_params)``.

    ``max_tokens=None`` means the rest of ``max_length``. Text is decoded for the agent only; the token ids are the
    engine's, never re-encoded.
    """

    def __init__(self, batcher: LockstepBatcher, episode: int, tokenizer: Any, max_length: int) -> None:
        self._batcher = batcher
        self._episode = episode
        self._tokenizer = tokenizer
        self._max_length = max_length

    async def generate(self, prompt_token_ids: Sequence[int], sampling_params: Any = None, **_: Any) -> RequestOutput:
        params = sampling_params if sampling_params is not None else SamplingParams()
        if not isinstance(params, SamplingParams):  # a dict, a SamplingSpec or a real vllm.SamplingParams
            params = coerce_sampling_params(params, SamplingParams())
        ids = [int(t) for t in prompt_token_ids]
        limit = params.max_tokens if params.max_tokens is not None else self._max_length - len(ids)
        if limit < 1:
            raise AgentProblem(f"generate() asked for max_tokens={limit} (prompt of {len(ids)} tokens)")
        out = await self._batcher.generate(self._episode, ids, params.to_spec(limit))
        text = self._tokenizer.decode(out.output_ids, skip_special_tokens=params.skip_special_tokens)
        lps = (
            [{t: Logprob(lp)} for t, lp in zip(out.output_ids, out.logprobs, strict=True)]
            if params.logprobs is not None
            else None
        )
        completion = CompletionOutput(0, text, list(out.output_ids), lps, out.finish_reason, sum(out.logprobs))
        return RequestOutput(ids, [completion], out)


# -- the protocol ----------------------------------------------------------------------------------------------------


class AgentInstanceBase(ABC):
    """One environment episode. A new instance is made per sample, with no arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: B027 (OpenRLHF subclasses call it)
        pass

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """``states = {"observation": prompt text, "label": label}`` -> ``{"observation": first observation}``."""
        return states

    @abstractmethod
    async def step(self, states: dict, **kwargs: Any) -> dict:
        """One environment step after an action; see :mod:`rlhf.agents.results` for the returned dict."""
        raise NotImplementedError


class AgentExecutorBase(ABC):
    """Runs episodes. Subclasses implement ``execute`` (one sample, OpenRLHF's signature) and may override
    :meth:`run_batch` to run a whole batch their own way."""

    # Set by the loader (rlhf.agents.loader) from the agent file and the agent section of the spec.
    agent_path: str = "<in-process agent>"
    max_turns: int = 8  # 0: no limit besides the length budget
    step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S

    def configure(
        self, *, agent_path: str | None = None, max_turns: int | None = None, step_timeout_s: float | None = None
    ) -> AgentExecutorBase:
        if agent_path is not None:
            self.agent_path = agent_path
        if max_turns is not None:
            self.max_turns = max_turns
        if step_timeout_s is not None:
            self.step_timeout_s = step_timeout_s
        return self

    @abstractmethod
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
        """One episode -> OpenRLHF's episode dict (see :mod:`rlhf.agents.results`)."""
        raise NotImplementedError

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
        """Run ``sampling.n`` episodes per prompt (prompt-major, like ``engine.generate``) -> one Rollout each.

        Args:
            engine: anything with ``generate(prompts: list[list[int]], sampling) -> list[Rollout]`` (synchronous).
            tokenizer: the policy's HF tokenizer (feedback text is tokenised with it, without special tokens).
            prompts, labels: the dataset's prompt text (chat template already applied) and labels.
            sampling: per-turn settings; ``max_new_tokens`` caps each generation.
            max_length: the token budget of a whole episode (prompt + generations + feedback).
            prompt_ids: the data pipeline's tokens of ``prompts``; used instead of tokenising the text again.
        Raises:
            AgentError: naming the agent file, the sample and the problem.
        """
        episodes = expand(prompts, labels, prompt_ids, sampling.n)
        batcher = LockstepBatcher(engine, len(episodes))
        params = SamplingParams.from_spec(sampling)
        params.n = 1

        async def one(index: int, prompt: str, label: Any, ids: list[int] | None) -> Rollout:
            _EPISODE.set(EpisodeContext(index, prompt, ids))
            try:
                llm = EpisodeEngine(batcher, index, tokenizer, max_length)
                result = await self.execute(prompt, label, params.clone(), max_length, tokenizer, llm)
                return rollout_from_result(result)
            except RolloutEngineError:
                raise
            except AgentProblem as exc:
                raise AgentError(str(exc), agent=self.agent_path, sample=index, prompt=prompt) from exc
            except AgentError:
                raise
            except Exception as exc:
                raise AgentError(
                    f"execute() raised {type(exc).__name__}: {exc}", agent=self.agent_path, sample=index, prompt=prompt
                ) from exc
            finally:
                batcher.finished(index)

        return await gather_episodes([one(i, *ep) for i, ep in enumerate(episodes)])

    def run(self, *args: Any, **kwargs: Any) -> list[Rollout]:
        """:meth:`run_batch` from synchronous code (a Ray actor method, a test)."""
        return asyncio.run(self.run_batch(*args, **kwargs))

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what the executor holds (servers, threads); it may be used again afterwards."""


def expand(
    prompts: Sequence[str], labels: Sequence[Any], prompt_ids: Sequence[Sequence[int]] | None, n: int
) -> list[tuple[str, Any, list[int] | None]]:
    """(prompt, label, prompt ids) per episode: each prompt ``n`` times in a row."""
    if len(labels) != len(prompts) or (prompt_ids is not None and len(prompt_ids) != len(prompts)):
        raise ValueError(
            f"run_batch: {len(prompts)} prompts, {len(labels)} labels"
            + ("" if prompt_ids is None else f", {len(prompt_ids)} prompt_ids")
            + "; they must match"
        )
    if n < 1:
        raise ValueError(f"run_batch: sampling.n must be >= 1, got {n}")
    out = []
    for i, (prompt, label) in enumerate(zip(prompts, labels, strict=True)):
        ids = None if prompt_ids is None else [int(t) for t in prompt_ids[i]]
        out += [(prompt, label, ids)] * n
    return out


async def gather_episodes(coros: list) -> list[Rollout]:
    """Run episode coroutines concurrently; on failure cancel the rest and raise the lowest-numbered sample's
    error (with a count of the others)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    failed = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
    if failed:
        first = failed[0]
        if len(failed) > 1 and isinstance(first, AgentError):
            first.args = (f"{first.args[0]} (and {len(failed) - 1} more samples failed)",)
        raise first
    return [t.result() for t in tasks]
