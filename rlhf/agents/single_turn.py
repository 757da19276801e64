"""The default executor: one generation per sample, the reward left to the reward source (model, function, URL,
verifier). The whole batch goes to the engine as one ``generate`` call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rlhf.agents.base import AgentExecutorBase, current_episode
from rlhf.agents.multi_turn import encode
from rlhf.agents.sampling import SamplingParams
from rlhf.backends.contract.rollout import Rollout, SamplingSpec


def fit_prompt(ids: list[int], max_length: int, max_new_tokens: int) -> list[int]:
    """``ids`` left-truncated so that ``max_new_tokens`` more fit in ``max_length`` (at least one token kept)."""
    room = max(1, max_length - max_new_tokens)
    return ids[-room:] if len(ids) > room else ids


class SingleTurnAgentExecutor(AgentExecutorBase):
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
        """``len(prompts) * sampling.n`` rollouts (prompt-major) from one engine call; reward None."""
        if len(labels) != len(prompts) or (prompt_ids is not None and len(prompt_ids) != len(prompts)):
            raise ValueError("run_batch: prompts, labels and prompt_ids must have the same length")
        ids = [list(p) for p in prompt_ids] if prompt_ids is not None else [encode(tokenizer, p) for p in prompts]
        new = min(sampling.max_new_tokens, max_length - 1)
        ids = [fit_prompt(p, max_length, new) for p in ids]
        if new != sampling.max_new_tokens:
            sampling = replace(sampling, max_new_tokens=new)
        return list(await asyncio.to_thread(engine.generate, ids, sampling))

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
        ctx = current_episode()
        ids = list(ctx.prompt_ids) if ctx is not None and ctx.prompt_ids is not None else encode(hf_tokenizer, prompt)
        max_tokens = min(sampling_params.max_tokens or max_length, max_length - 1)
        ids = fit_prompt(ids, max_length, max_tokens)
        params = sampling_params.clone()
        params.max_tokens = max_tokens
        output = (await llm_engine.generate(ids, params)).outputs[0]
        action = list(output.token_ids)
        if output.logprobs:
            lps = [float(d[t].logprob) for t, d in zip(action, output.logprobs, strict=True)]
        else:
            lps = [0.0] * len(action)
        return {
            "prompt": prompt,
            "label": label,
            "observation_tokens": ids + action,
            "action_ranges": [(len(ids), len(ids) + len(action))],
            "rollout_log_probs": [0.0] * len(ids) + lps,
            "truncated": output.finish_reason == "length",
            "reward": None,
            "scores": None,
            "extra_logs": {},
        }
