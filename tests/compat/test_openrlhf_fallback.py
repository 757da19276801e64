"""OpenRLHF reward and agent files import ``openrlhf.utils`` / ``openrlhf.utils.agent``: without OpenRLHF installed
those names resolve to ours; any other ``openrlhf`` name fails naming itself; a real package (here a stub the test
puts on the path) always wins; and OpenRLHF's grader keeps its semantics."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.agents.errors import AgentError
from rlhf.agents.loader import load_agent, load_agent_module
from rlhf.compat import openrlhf as fallback
from rlhf.compat.openrlhf_math import extract_boxed_answer, grade_answer
from rlhf.rewards.function import FunctionReward
from rlhf.rewards.result import RewardError

REPO = Path(__file__).resolve().parents[2]

MATH_REWARD = """
    import torch
    from openrlhf.utils import extract_boxed_answer, grade_answer

    def reward_func(queries, prompts, labels, **kwargs):
        rewards = []
        for query, prompt, label in zip(queries, prompts, labels):
            response = query[len(prompt):] if prompt in query else query
            rewards.append(1.0 if grade_answer(extract_boxed_answer(response), label) else 0.0)
        r = torch.tensor(rewards, dtype=torch.float)
        return {"rewards": r, "scores": r, "extra_logs": {"math_accuracy": r.mean()}}
"""


def write(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


@pytest.fixture(autouse=True)
def no_real_openrlhf():
    if fallback.real_openrlhf_spec() is not None:
        pytest.skip("a real openrlhf is installed here; the fallback is (rightly) inactive")


def test_math_reward_file_written_for_openrlhf_runs_unchanged(tmp_path):
    reward = FunctionReward(write(tmp_path, "math_reward_func.py", MATH_REWARD))
    res = reward.score(
        ["Q: half? A: \\boxed{\\frac{1}{2}}", "Q: 7? A: \\boxed{8}", "Q: 1000? A: \\boxed{1,000}"],
        ["Q: half? A:", "Q: 7? A:", "Q: 1000? A:"],
        [" \\boxed{\\frac{1}{2}}", " \\boxed{8}", " \\boxed{1,000}"],
        ["0.5", "7", "1000"],
    )
    assert res.rewards == [1.0, 0.0, 1.0]
    assert res.extra_logs["math_accuracy"] == pytest.approx([2 / 3] * 3)


def test_agent_names_are_ours():
    import rlhf.agents as ours

    fallback.install()
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase, MultiTurnAgentExecutor

    assert (AgentExecutorBase, AgentInstanceBase, MultiTurnAgentExecutor) == (
        ours.AgentExecutorBase,
        ours.AgentInstanceBase,
        ours.MultiTurnAgentExecutor,
    )
    import openrlhf

    assert sorted(fallback.provided_names()) == sorted(
        [
            "openrlhf.utils.extract_boxed_answer",
            "openrlhf.utils.grade_answer",
            "openrlhf.utils.agent.AgentExecutorBase",
            "openrlhf.utils.agent.AgentInstanceBase",
            "openrlhf.utils.agent.MultiTurnAgentExecutor",
            "openrlhf.utils.agent.SingleTurnAgentExecutor",
            "openrlhf.utils.math_utils.extract_boxed_answer",
            "openrlhf.utils.math_utils.grade_answer",
            "openrlhf.utils.math_utils.grade_answer_mathd",
            "openrlhf.utils.math_utils.grade_answer_sympy",
        ]
    )
    assert "stand-in" in openrlhf.__doc__


def test_openrlhf_agent_file_loads_as_an_executor(tmp_path):
    path = write(
        tmp_path,
        "agent_func.py",
        """
        from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

        class AgentInstance(AgentInstanceBase):
            async def step(self, states, **kwargs):
                return {"rewards": 1.0, "environment_feedback": "", "done": True}

        class AgentExecutor(MultiTurnAgentExecutor):
            def __init__(self):
                super().__init__(AgentInstance)
        """,
    )
    agent = load_agent(path, "multi_turn")
    assert type(agent).__name__ == "AgentExecutor" and agent.agent_instance_cls.__name__ == "AgentInstance"


@pytest.mark.parametrize(
    ("line", "missing"),
    [
        ("from openrlhf.utils import get_tokenizer", "openrlhf.utils.get_tokenizer"),
        ("import openrlhf.trainer.ppo_utils", "module openrlhf.trainer"),
        ("from openrlhf.utils.agent import SomethingElse", "openrlhf.utils.agent.SomethingElse"),
    ],
)
def test_other_openrlhf_names_fail_naming_the_name_and_the_way_out(line, missing, tmp_path):
    path = write(tmp_path, "needs_more.py", f"{line}\n\ndef reward_func(q, p, l):\n    return [0.0] * len(q)\n")
    with pytest.raises(RewardError) as err:
        FunctionReward(path)
    msg = str(err.value)
    assert missing in msg and "install OpenRLHF itself" in msg and "openrlhf.utils.agent: AgentExecutorBase" in msg
    with pytest.raises(AgentError, match=missing.split()[-1]):
        load_agent_module(path)


def test_single_turn_executor_refuses_openrlhfs_reward_url_argument():
    fallback.install()
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    SingleTurnAgentExecutor()
    with pytest.raises(AgentError, match="reward.function=FILE.py or reward.urls"):
        SingleTurnAgentExecutor("http://127.0.0.1:5000/get_reward")


def test_a_real_openrlhf_package_on_the_path_is_used_instead(tmp_path):
    stub = tmp_path / "site"
    (stub / "openrlhf" / "utils").mkdir(parents=True)
    (stub / "openrlhf" / "__init__.py").write_text("WHO = 'stub'\n")
    (stub / "openrlhf" / "utils" / "__init__.py").write_text(
        "def extract_boxed_answer(text):\n    return text\n\ndef grade_answer(given, truth):\n    return True\n"
    )
    reward = write(tmp_path, "math_reward_func.py", MATH_REWARD)
    probe = textwrap.dedent(
        f"""
        from rlhf.rewards.function import FunctionReward
        from rlhf.compat.openrlhf import fallback_active
        import openrlhf
        res = FunctionReward({reward!r}).score(["a"], ["a"], [""], ["label that never matches"])
        print(openrlhf.WHO, res.rewards, fallback_active())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=ceiling(300))
    assert out.returncode == 0, out.stderr
    # The stub's grade_answer says True for anything: the reward file used it, not ours.
    assert out.stdout.split() == ["stub", "[1.0]", "False"]


def test_fallback_is_found_last_and_only_for_openrlhf(tmp_path, monkeypatch):
    fallback.install()
    fallback.install()
    finders = [f for f in sys.meta_path if isinstance(f, fallback._FallbackFinder)]
    assert len(finders) == 1 and sys.meta_path[-1] is finders[0]
    assert finders[0].find_spec("json") is None
    (tmp_path / "openrlhf_alike.py").write_text("")  # a module whose name merely starts alike
    monkeypatch.syspath_prepend(str(tmp_path))
    assert finders[0].find_spec("openrlhf_alike") is None
    assert importlib.util.find_spec("openrlhf_alike").origin == str(tmp_path / "openrlhf_alike.py")


@pytest.mark.parametrize(
    ("given", "truth", "equal"),
    [
        ("\\frac{1}{2}", "0.5", True),  # MATH normalisation writes 0.5 as \frac{1}{2}
        ("1/2", "\\frac12", True),
        ("x = 5", "5", True),
        ("1,000", "1000", True),
        ("5 cm", "5", True),  # units dropped by the sympy normaliser
        ("50\\%", "50", True),
        ("3+2x", "2x+3", True),  # sympy: simplify(difference) == 0
        ("(1,2)", "[1,2]", True),  # OpenRLHF does not compare a tuple's brackets
        ("2/4", "1/2", False),  # unreduced fractions must match as written
        ("\\text{(A)}", "(A)", True),
        ("7", "8", False),
        (None, "1", False),
    ],
)
def test_grade_answer_keeps_openrlhfs_semantics(given, truth, equal):
    assert grade_answer(given, truth) is equal


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{x^{2}}", "x^{2}"),
        ("\\fbox{3}", None),  # found, but OpenRLHF only unwraps \boxed{
        ("\\boxed{unbalanced", None),
        ("no box", None),
    ],
)
def test_extract_boxed_answer_keeps_openrlhfs_semantics(text, answer):
    assert extract_boxed_answer(text) == answer


@pytest.mark.slow
def test_a_ray_worker_loading_an_openrlhf_reward_file_gets_the_fallback(ray_cluster, tmp_path):
    import ray

    path = write(tmp_path, "math_reward_func.py", MATH_REWARD)

    @ray.remote(num_cpus=0.1)
    def score_in_worker(p: str):
        import sys as worker_sys

        from rlhf.rewards.function import FunctionReward as Reward

        res = Reward(p).score(["\\boxed{4}", "\\boxed{5}"], ["", ""], ["", ""], ["4", "4"])
        return res.rewards, worker_sys.modules["openrlhf"].__doc__

    rewards, doc = ray.get(score_in_worker.remote(path), timeout=ceiling(300))
    assert rewards == [1.0, 0.0]
    assert "stand-in" in doc
