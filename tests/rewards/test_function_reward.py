"""reward_func files (OpenRLHF protocol): called once per batch; every mistake named with the file."""

from __future__ import annotations

import textwrap

import pytest

from rlhf.rewards import FunctionReward, RewardError

Q, P, R, L = ["p1r1", "p2r2"], ["p1", "p2"], ["r1", "r2"], ["1", "2"]


@pytest.fixture
def reward_file(tmp_path):
    def write(body: str, name: str = "reward.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)

    return write


def test_dict_with_tensors_scores_and_extra_logs(reward_file):
    path = reward_file(
        """
        import torch
        CALLS = []
        def reward_func(queries, prompts, labels, **kwargs):
            CALLS.append(len(queries))
            r = torch.tensor([float(l) for l in labels])
            return {"rewards": r, "scores": r > 1, "extra_logs": {"len": [len(q) for q in queries], "k": 3}}
        """
    )
    src = FunctionReward(path)
    res = src.score(Q, P, R, L)
    assert res.rewards == [1.0, 2.0] and res.scores == [0.0, 1.0]
    assert res.extra_logs == {"len": [4.0, 4.0], "k": [3.0, 3.0]}
    assert src.fn.__globals__["CALLS"] == [2]  # one call for the whole batch


def test_plain_list_return_and_responses_keyword(reward_file):
    path = reward_file(
        """
        def reward_func(queries, prompts, labels, responses):
            return [float(r == "r2") for r in responses]
        """
    )
    res = FunctionReward(path).score(Q, P, R, L)
    assert res.rewards == res.scores == [0.0, 1.0] and res.extra_logs == {}


def test_three_argument_functions_are_called_without_extras(reward_file):
    path = reward_file("def reward_func(queries, prompts, labels):\n    return [0.5] * len(queries)\n")
    assert FunctionReward(path).score(Q, P, R, L).rewards == [0.5, 0.5]


def test_async_reward_func_is_awaited(reward_file):
    path = reward_file(
        """
        import asyncio
        async def reward_func(queries, prompts, labels):
            await asyncio.sleep(0)
            return {"rewards": [1, 0]}
        """
    )
    assert FunctionReward(path).score(Q, P, R, L).rewards == [1.0, 0.0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x = 1\n", "defines no reward_func"),
        ("reward_func = 3\n", "not a function"),
        ("import no_such_module_here\n", "failed to import: ModuleNotFoundError"),
    ],
)
def test_unusable_files_are_named(reward_file, body, message):
    path = reward_file(body)
    with pytest.raises(RewardError, match=message) as e:
        FunctionReward(path)
    assert path in str(e.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(RewardError, match=r"nope\.py does not exist.*reward\.function"):
        FunctionReward(str(tmp_path / "nope.py"))


@pytest.mark.parametrize(
    ("ret", "message"),
    [
        ("[1.0]", "has 1 values for 2 samples"),
        ("{'scores': [1, 2]}", "no 'rewards'"),
        ("['a', 'b']", r"rewards?\W.*\[0\] is str"),
        ("[float('nan'), 1.0]", "reward of sample 0 is nan"),
        ("'high'", "is str; expected a list or tensor"),
        ("{'rewards': [1, 2], 'extra_logs': {'x': [1]}}", r"extra_logs\['x'\] has 1 values"),
    ],
)
def test_wrong_return_values_are_named_with_the_file(reward_file, ret, message):
    path = reward_file(f"def reward_func(queries, prompts, labels):\n    return {ret}\n")
    with pytest.raises(RewardError, match=message) as e:
        FunctionReward(path).score(Q, P, R, L)
    assert path in str(e.value)


def test_exceptions_inside_reward_func_are_wrapped_with_the_file(reward_file):
    path = reward_file("def reward_func(queries, prompts, labels):\n    raise KeyError('answer')\n")
    with pytest.raises(RewardError, match=r"raised KeyError: 'answer'") as e:
        FunctionReward(path).score(Q, P, R, L)
    assert path in str(e.value) and isinstance(e.value.__cause__, KeyError)


def test_the_static_check_and_the_loader_ask_for_the_same_definition(reward_file):
    # One contract (rlhf.rewards.function): the check before start-up and the load at start-up give the same fix.
    from rlhf.planning.preflight.python_files import check_reward_file

    path = reward_file("def score(queries):\n    return [0.0] * len(queries)\n")
    (finding,) = check_reward_file(path)
    with pytest.raises(RewardError) as e:
        FunctionReward(path)
    wanted = "def reward_func(queries, prompts, labels, **kwargs)"
    assert wanted in finding.fix and wanted in str(e.value)
