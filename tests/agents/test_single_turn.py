"""The default executor: one engine call per batch, prompts fitted to the budget, no reward."""

from __future__ import annotations

from agent_helpers import FakeEngine

from rlhf.agents import SingleTurnAgentExecutor
from rlhf.backends.contract.rollout import SamplingSpec


def test_one_engine_call_for_the_batch_with_prompts_left_truncated_to_leave_room(tokenizer):
    engine = FakeEngine(lambda p: tokenizer.convert_tokens_to_ids(["a", "<|end|>"]))
    long_ids = list(range(20))
    out = SingleTurnAgentExecutor().run(
        engine, tokenizer, ["p", "q"], ["", ""], SamplingSpec(max_new_tokens=4, n=2), 10, prompt_ids=[long_ids, [5]]
    )
    assert len(engine.calls) == 1
    assert engine.calls[0][0] == [long_ids[-6:], [5]]  # 10 - 4 tokens kept, from the end
    assert [r.prompt_ids for r in out] == [long_ids[-6:]] * 2 + [[5]] * 2
    assert all(r.reward is None and r.action_mask == [1, 1] for r in out)
