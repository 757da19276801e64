"""A multi-step arithmetic environment with feedback, for ``agent.executor=multi_turn``.

Rows look like ``{"input": "3+4=", "label": "7"}`` (examples/agents/arith.jsonl); the data pipeline applies the
chat template, so the policy continues ``<|user|>\\n3+4=<|end|>\\n<|assistant|>\\n``. After each answer the
environment either ends the episode (correct, or out of attempts) or says "wrong, try again" as a new user turn,
written in the tiny model's chat markers (adapt FEEDBACK for another template).

Reward (summed over steps by the executor; only the last step pays): 1 / attempt number when correct, 0.1 for
giving a number at all when every attempt was wrong, else 0. ``scores`` is 1.0 when the answer was found.

This is an OpenRLHF agent file: only the import differs from ``openrlhf.utils.agent``.
"""

from __future__ import annotations

import re

from rlhf.agents import AgentInstanceBase, MultiTurnAgentExecutor

MAX_ATTEMPTS = 3
END, USER, ASSISTANT = "<|end|>", "<|user|>", "<|assistant|>"
FEEDBACK = f"\n{USER}\nwrong, try again{END}\n{ASSISTANT}\n"
_SPECIAL = re.compile(r"<\|[a-z]+\|>")
_NUMBER = re.compile(r"\s*(-?\d+)")


def parse_answer(text: str) -> str | None:
    """The integer the reply starts with (special tokens removed), or None."""
    match = _NUMBER.match(_SPECIAL.sub("", text))
    return str(int(match.group(1))) if match else None


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.attempts = 0

    async def reset(self, states: dict, **kwargs) -> dict:
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs) -> dict:
        self.attempts += 1
        action = states["action_text"]
        answer = parse_answer(action)
        correct = answer is not None and answer == str(states["label"]).strip()
        done = correct or self.attempts >= MAX_ATTEMPTS
        if correct:
            reward = 1.0 / self.attempts
        elif done:
            reward = 0.1 if answer is not None else 0.0
        else:
            reward = 0.0
        # Close the assistant turn when generation stopped without the end marker (length), then the user turn.
        feedback = "" if done else ("" if action.endswith(END) else END) + FEEDBACK
        return {
            "rewards": reward,
            "scores": float(correct),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"attempts": float(self.attempts), "correct": float(correct)},
        }


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
