"""The multi-turn executor: token-exact trajectories, masks, rewards, budgets, batching and sampling updates."""

from __future__ import annotations

from agent_helpers import FakeEngine

from rlhf.agents import AgentInstanceBase, MultiTurnAgentExecutor
from rlhf.backends.contract.rollout import SamplingSpec


def ids(tokenizer, *tokens: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(list(tokens))


def enc(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class TwoSteps(AgentInstanceBase):
    """Wrong first (feedback "no"), done at the second step; rewards 0.25 then 0.5, scores only at the end."""

    def __init__(self):
        self.n = 0

    async def step(self, states, **kwargs):
        self.n += 1
        done = self.n == 2
        return {
            "rewards": 0.5 if done else 0.25,
            "scores": 0.9 if done else None,
            "environment_feedback": "" if done else "no",
            "done": done,
            "extra_logs": {"n": self.n, "first": 1.0} if self.n == 1 else {"n": self.n},
        }


def test_feedback_tokens_are_appended_masked_with_zero_logprob_and_rewards_summed(tokenizer):
    engine = FakeEngine(lambda p: ids(tokenizer, "o", "k", "<|end|>"))
    [r] = MultiTurnAgentExecutor(TwoSteps).run(engine, tokenizer, ["q"], ["x"], SamplingSpec(max_new_tokens=8), 64)
    action = ids(tokenizer, "o", "k", "<|end|>")
    feedback = enc(tokenizer, "no")
    assert r.prompt_ids == enc(tokenizer, "q")
    assert r.output_ids == action + feedback + action
    assert r.action_mask == [1] * 3 + [0] * len(feedback) + [1] * 3
    assert r.logprobs == [-0.01, -0.02, -0.03] + [0.0] * len(feedback) + [-0.01, -0.02, -0.03]
    assert r.reward == 0.75 and r.scores == 0.9
    assert r.finish_reason == "stop"
    assert r.extra == {"extra_logs": {"n": 2.0, "first": 1.0}, "turns": 2}


def test_output_ids_are_exactly_generated_plus_feedback_ids_with_non_canonical_bpe(tokenizer):
    # The engine "samples" a then b although the tokenizer would merge them into "ab"; the feedback "ab" is the
    # merged token. Decoding and re-encoding the trajectory would give different ids.
    generated = ids(tokenizer, "a", "b", "1", "2")
    engine = FakeEngine(lambda p: generated)
    [r] = MultiTurnAgentExecutor(TwoSteps).run(engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=4), 64)
    feedback = enc(tokenizer, "no")
    assert r.output_ids == generated + feedback + generated
    assert enc(tokenizer, tokenizer.decode(r.output_ids)) != r.output_ids  # re-encoding would have changed them
    # the second turn's prompt was the exact token history, not re-encoded text
    second_prompt = engine.calls[1][0][0]
    assert second_prompt == r.prompt_ids + generated + feedback


def test_each_turn_of_all_episodes_goes_to_the_engine_as_one_call(tokenizer):
    class DoneAfterPromptLength(AgentInstanceBase):
        """Episode i stops after i + 1 steps (the prompt "qqq" has 3 characters)."""

        def __init__(self):
            self.n = 0

        async def reset(self, states, **kwargs):
            self.limit = len(states["observation"])
            return states

        async def step(self, states, **kwargs):
            self.n += 1
            return {"rewards": 0.0, "environment_feedback": "!", "done": self.n >= self.limit}

    engine = FakeEngine(lambda p: ids(tokenizer, "a"))
    prompts = ["q", "qq", "qqq"]
    out = MultiTurnAgentExecutor(DoneAfterPromptLength).run(
        engine, tokenizer, prompts, ["", "", ""], SamplingSpec(max_new_tokens=2), 64
    )
    assert [len(call[0]) for call in engine.calls] == [3, 2, 1]
    assert [r.extra["turns"] for r in out] == [1, 2, 3]


def test_length_budget_truncates_the_last_generation_and_marks_length(tokenizer):
    class NeverDone(AgentInstanceBase):
        async def step(self, states, **kwargs):
            return {"rewards": 1.0, "environment_feedback": "ok", "done": False}

    engine = FakeEngine(lambda p: ids(tokenizer, *"xyzxyz"))
    [r] = MultiTurnAgentExecutor(NeverDone).run(engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=6), 10)
    # 1 prompt token + 6 generated + 1 feedback ("ok" is one merged token) = 8; the next turn gets 2 tokens.
    assert len(r.prompt_ids) + len(r.output_ids) == 10
    assert r.output_ids[-2:] == ids(tokenizer, "x", "y")
    assert r.action_mask == [1] * 6 + [0] + [1] * 2
    assert r.finish_reason == "length"
    assert r.reward == 2.0  # step() still saw the truncated action


def test_feedback_longer_than_the_budget_is_cut_to_it(tokenizer):
    class Chatty(AgentInstanceBase):
        async def step(self, states, **kwargs):
            return {"rewards": 0.0, "environment_feedback": "x" * 50, "done": False}

    engine = FakeEngine(lambda p: ids(tokenizer, "a", "<|end|>"))
    [r] = MultiTurnAgentExecutor(Chatty).run(engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=4), 12)
    assert len(r.prompt_ids) + len(r.output_ids) == 12
    assert r.action_mask == [1, 1] + [0] * 9
    assert r.finish_reason == "length"


def test_reset_rewrites_the_first_observation_and_prompt_ids_are_reused_when_it_does_not(tokenizer):
    class Rewrite(AgentInstanceBase):
        async def reset(self, states, **kwargs):
            text = states["observation"]
            return {"observation": text + " ok" if states["label"] == "rewrite" else text}

        async def step(self, states, **kwargs):
            return {"rewards": 0.0, "environment_feedback": "", "done": True}

    engine = FakeEngine(lambda p: ids(tokenizer, "<|end|>"))
    given = ids(tokenizer, "a", "b")  # the data pipeline's ids for "ab" (not what encoding "ab" gives)
    out = MultiTurnAgentExecutor(Rewrite).run(
        engine,
        tokenizer,
        ["ab", "ab"],
        ["keep", "rewrite"],
        SamplingSpec(max_new_tokens=2),
        32,
        prompt_ids=[given, given],
    )
    assert out[0].prompt_ids == given
    assert out[1].prompt_ids == enc(tokenizer, "ab ok")


def test_sampling_params_returned_by_step_apply_to_the_next_turn(tokenizer):
    class Cooler(AgentInstanceBase):
        def __init__(self):
            self.n = 0

        async def step(self, states, **kwargs):
            self.n += 1
            params = states["sampling_params"]
            params.temperature = 0.5
            params.max_tokens = 1
            return {"rewards": 0.0, "environment_feedback": "", "done": self.n == 2, "sampling_params": params}

    engine = FakeEngine(lambda p: ids(tokenizer, "a", "b", "c"))
    [r] = MultiTurnAgentExecutor(Cooler).run(
        engine, tokenizer, ["q"], [""], SamplingSpec(max_new_tokens=3, temperature=1.0), 32
    )
    first, second = (call[1] for call in engine.calls)
    assert (first.temperature, first.max_new_tokens) == (1.0, 3)
    assert (second.temperature, second.max_new_tokens) == (0.5, 1)
    assert r.action_mask == [1, 1, 1, 1]


def test_samples_per_prompt_expand_prompt_major_with_a_new_instance_each(tokenizer):
    made = []

    class Counted(AgentInstanceBase):
        def __init__(self):
            made.append(self)

        async def step(self, states, **kwargs):
            return {"rewards": float(states["label"]), "environment_feedback": "", "done": True}

    engine = FakeEngine(lambda p: ids(tokenizer, "<|end|>"))
    out = MultiTurnAgentExecutor(Counted).run(
        engine, tokenizer, ["q", "w"], ["1", "2"], SamplingSpec(max_new_tokens=2, n=3), 16
    )
    assert [r.reward for r in out] == [1.0] * 3 + [2.0] * 3
    assert len({id(m) for m in made}) == 6
    assert len(engine.calls) == 1 and engine.calls[0][1].n == 1
