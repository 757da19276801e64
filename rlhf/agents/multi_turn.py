"""The multi-turn executor: generate, ``step()``, append the feedback, repeat (OpenRLHF's MultiTurnAgentExecutor).

Per episode (many run together; their generations are batched turn by turn, see rlhf.agents.batching):

1. a new ``AgentInstance()``; ``reset({"observation": prompt, "label": label})`` may rewrite the first observation
   (its tokens are the data pipeline's when it does not), which is left-truncated to leave room for one turn;
2. generate at most ``min(max_tokens, budget left)`` tokens and append them as they came (action_mask 1, the
   engine's log-probs): generated tokens are never decoded and re-encoded, the decoded text is for the agent only;
3. ``step({"observation_text", "action_text", "label", "sampling_params"})`` (with a timeout), validated;
4. append ``environment_feedback`` tokenised without special tokens (action_mask 0, log-prob 0.0), cut to the
   budget;
5. repeat until ``done``, the budget (``max_length`` tokens in all) is spent -> finish_reason "length", or
   ``max_turns`` steps without ``done`` -> AgentError.

Episode reward = sum of step rewards; scores = the last step's ``scores`` (default: the reward sum); extra_logs =
the steps' extra_logs merged (later steps override).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from typing import Any

from rlhf.agents.base import AgentExecutorBase, current_episode
from rlhf.agents.errors import AgentError, AgentProblem
from rlhf.agents.results import check_step_result
from rlhf.agents.sampling import SamplingParams


class MultiTurnAgentExecutor(AgentExecutorBase):
    """Runs ``agent_instance_cls`` episodes. Subclass it in an agent file, or let the loader wrap a bare class."""

    def __init__(self, agent_instance_cls: type) -> None:
        if not isinstance(agent_instance_cls, type) or not callable(getattr(agent_instance_cls, "step", None)):
            raise AgentError(
                f"MultiTurnAgentExecutor needs an agent instance class with an async step(); got {agent_instance_cls!r}"
            )
        self.agent_instance_cls = agent_instance_cls

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
        instance = self._new_instance()
        reset = await self._call(instance.reset, {"observation": prompt, "label": label}, "reset()")
        if not isinstance(reset, dict) or not isinstance(reset.get("observation"), str):
            raise AgentProblem(f"reset() must return a dict with a str 'observation'; got {reset!r:.120}")
        observation_text = reset["observation"]
        ctx = current_episode()
        if ctx is not None and ctx.prompt_ids is not None and observation_text == prompt:
            tokens = list(ctx.prompt_ids)
        else:
            tokens = encode(hf_tokenizer, observation_text)
        if not tokens:
            raise AgentProblem("the first observation (reset()['observation']) is empty; the policy needs a prompt")

        per_turn = sampling_params.max_tokens or max_length
        room = max_length - min(per_turn, max_length - 1)
        if len(tokens) > room:  # keep the end of the observation, which the answer follows
            tokens = tokens[-room:]
            observation_text = hf_tokenizer.decode(tokens, skip_special_tokens=False)
        action_ranges: list[tuple[int, int]] = []
        logprobs = [0.0] * len(tokens)
        total_reward = 0.0
        scores: float | None = None
        extra_logs: dict[str, float] = {}
        done = cut = False

        while True:
            remaining = max_length - len(tokens)
            if remaining <= 0:
                break
            if self.max_turns > 0 and len(action_ranges) >= self.max_turns:
                raise AgentProblem(
                    f"step() did not return done=True within {self.max_turns} turns (agent.max_turns); end the "
                    "episode in step() (e.g. after a number of attempts) or raise agent.max_turns"
                )
            params = copy.deepcopy(sampling_params)
            params.max_tokens = min(params.max_tokens or remaining, remaining)
            output = (await llm_engine.generate(tokens, params)).outputs[0]
            action = list(output.token_ids)
            action_ranges.append((len(tokens), len(tokens) + len(action)))
            tokens += action
            if output.logprobs is not None:
                logprobs += [
                    float(d[t].logprob) if t in d else 0.0 for t, d in zip(action, output.logprobs, strict=True)
                ]
            else:
                logprobs += [0.0] * len(action)
            # The budget, not the per-turn limit, cut this generation: the episode is truncated.
            cut = output.finish_reason == "length" and params.max_tokens == remaining

            states = {
                "observation_text": observation_text,
                "action_text": output.text,
                "label": label,
                "sampling_params": params,
            }
            result = check_step_result(await self._call(instance.step, states, "step()"), params)
            total_reward += result.reward
            scores = result.scores if result.scores is not None else total_reward
            extra_logs.update(result.extra_logs)

            feedback = encode(hf_tokenizer, result.feedback) if result.feedback else []
            if len(feedback) > max_length - len(tokens):
                feedback = feedback[: max_length - len(tokens)]
                cut = True
            tokens += feedback
            logprobs += [0.0] * len(feedback)
            observation_text = observation_text + output.text + result.feedback
            sampling_params = result.sampling
            if result.done:
                done = True
                break

        return {
            "prompt": prompt,
            "label": label,
            "observation_tokens": tokens,
            "action_ranges": action_ranges,
            "rollout_log_probs": logprobs,
            "truncated": cut or not done,
            "reward": total_reward,
            "scores": scores if scores is not None else total_reward,
            "extra_logs": extra_logs,
        }

    def _new_instance(self) -> Any:
        cls = self.agent_instance_cls
        if inspect.iscoroutinefunction(cls.__init__):
            raise AgentProblem(
                f"{cls.__name__}.__init__ is 'async def'; make it a plain 'def' (constructors cannot be awaited)"
            )
        try:
            return cls()
        except Exception as exc:
            raise AgentProblem(f"{cls.__name__}() raised {type(exc).__name__}: {exc}") from exc

    async def _call(self, method: Any, states: dict, what: str) -> Any:
        """``method(states)`` (reset or step) awaited with the step timeout; a plain return value is accepted."""
        try:
            result = method(states)
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, self.step_timeout_s)
            return result
        except asyncio.TimeoutError:
            raise AgentProblem(f"{what} did not return within {self.step_timeout_s:g} s") from None
        except AgentProblem:
            raise
        except Exception as exc:
            raise AgentProblem(f"{what} raised {type(exc).__name__}: {exc}") from exc


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens added (special-token strings inside it still map to theirs)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
