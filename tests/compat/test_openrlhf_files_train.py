"""OpenRLHF-style reward and agent files, written here as OpenRLHF's examples are (imports from ``openrlhf.utils`` and
``openrlhf.utils.agent``, torch tensors as rewards), train a few steps through the real pipeline: DeepSpeed,
the hf rollout engine, the tiny model (the local executor). No openrlhf package is installed."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from rlhf.compat import openrlhf as fallback
from rlhf.launch.job import run as run_pipeline
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 2
SMALL = [
    f"trainer.max_steps={STEPS}",
    "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=8",
    "logging.mlflow=false",
    "logging.progress=false",
]

REWARD_FILE = """
    import torch
    from openrlhf.utils import extract_boxed_answer, grade_answer


    def reward_func(queries, prompts, labels, **kwargs):
        rewards = []
        for query, prompt, label in zip(queries, prompts, labels):
            response = query[len(prompt):] if prompt in query else query
            answer = extract_boxed_answer(response) or response.split("<|")[0].strip()
            rewards.append(1.0 if grade_answer(answer, label) else 0.0)
        rewards = torch.tensor(rewards, dtype=torch.float)
        return {"rewards": rewards, "scores": rewards, "extra_logs": {"math_accuracy": rewards.mean()}}
"""

AGENT_FILE = """
    import torch
    from openrlhf.utils import grade_answer
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    FEEDBACK = "\\n<|user|>\\nwrong, try again<|end|>\\n<|assistant|>\\n"


    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.tries = 0

        async def reset(self, states, **kwargs):
            return {"observation": states["observation"]}

        async def step(self, states, **kwargs):
            self.tries += 1
            answer = states["action_text"].split("<|")[0].strip()
            correct = grade_answer(answer, states["label"])
            done = correct or self.tries >= 2
            return {
                "rewards": torch.tensor(1.0 if correct else 0.0),
                "scores": torch.tensor(1.0 if correct else 0.0),
                "environment_feedback": "" if done else FEEDBACK,
                "done": done,
                "sampling_params": states.get("sampling_params", None),
                "extra_logs": {"tries": torch.tensor(float(self.tries))},
            }


    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)
"""


@pytest.fixture(autouse=True)
def no_real_openrlhf(monkeypatch):
    if fallback.real_openrlhf_spec() is not None:
        pytest.skip("a real openrlhf is installed here; the fallback is (rightly) inactive")
    monkeypatch.setenv("RLHF_EXAMPLES", str(EXAMPLES))


def _train(recipe: str, run_dir: Path, *overrides: str):
    spec = load_spec([f"+recipe={recipe}", *SMALL, *overrides])
    result = run_pipeline(spec, plan(spec), run_dir)
    return result, read_metrics(run_dir)


def _assert_trained(result: dict, metrics: list[dict]) -> list[dict]:
    assert result["steps"] == STEPS
    train = [m for m in metrics if "train/policy_loss" in m]
    assert [int(m["step"]) for m in train] == list(range(1, STEPS + 1))
    assert all(math.isfinite(m["train/policy_loss"]) for m in train)
    return train


def test_openrlhf_reward_file_trains(tmp_path):
    path = tmp_path / "math_reward_func.py"
    path.write_text(textwrap.dedent(REWARD_FILE))
    result, metrics = _train("grpo_tiny_cpu", tmp_path / "run", "reward.verifier=", f"reward.function={path}")
    train = _assert_trained(result, metrics)
    # The file's own extra log reached the metrics: the rewards came from it.
    accuracy = [m[k] for m in train for k in m if k.endswith("math_accuracy")]
    assert len(accuracy) == STEPS and all(0.0 <= a <= 1.0 for a in accuracy)


def test_openrlhf_agent_file_trains(tmp_path):
    path = tmp_path / "agent_func.py"
    path.write_text(textwrap.dedent(AGENT_FILE))
    result, metrics = _train("agent_arith_tiny_cpu", tmp_path / "run", f"agent.path={path}", "agent.max_turns=2")
    train = _assert_trained(result, metrics)
    tries = [m[k] for m in train for k in m if k.endswith("tries")]
    assert len(tries) == STEPS and all(1.0 <= t <= 2.0 for t in tries)
