"""One reward loader, three contracts, chosen by the function's signature (never its name): TRL's keyword call,
veRL's per-sample compute_score, OpenRLHF's batched reward_func; reward.contract forces one; an ambiguous signature
is refused naming the choices."""

from __future__ import annotations

import asyncio
import math
import textwrap

import pytest

from rlhf.rewards import FunctionReward, RewardBatch, RewardError, score_batch
from rlhf.rewards.combine import UNSCORED_LOG
from rlhf.rewards.contracts import CONTRACTS
from rlhf.spec.schema import REWARD_CONTRACTS

PROMPTS = ["What is 2+2?", "What is 3+3?"]
RESPONSES = ["<think>add</think>4<|eos|>", "6<|eos|>"]
COMPLETIONS = ["<think>add</think>4", "6"]  # decoded without special tokens, as TRL and veRL see them
LABELS = ["4", "7"]


def batch(**overrides) -> RewardBatch:
    values = dict(
        queries=[p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)],
        prompts=list(PROMPTS),
        responses=list(RESPONSES),
        labels=list(LABELS),
        completions=list(COMPLETIONS),
        rows=[
            {"prompt": p, "label": lab, "datasource": "openai/gsm8k"} for p, lab in zip(PROMPTS, LABELS, strict=True)
        ],
        completion_ids=[[5, 6, 7], [8, 2]],
        group_size=2,
        step=3,
        max_steps=10,
    )
    values.update(overrides)
    return RewardBatch(**values)


@pytest.fixture
def write(tmp_path):
    def write(body: str, name: str = "my_reward.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)

    return write


TRL_DOC_STYLE = """
    CALLS = []

    def reward_func(prompts, completions, answer, **kwargs):
        CALLS.append(dict(prompts=prompts, completions=completions, answer=answer, **kwargs))
        kwargs["log_metric"]("my_metric", 0.5)
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]  # conversational or standard
        return [1.0 if t.strip().endswith(a) else 0.0 for t, a in zip(texts, answer)]
"""


def test_a_trl_signature_named_reward_func_is_called_with_trls_arguments(write):
    # The case: three positional parameters, named as TRL's documentation names them. Read as OpenRLHF's
    # (queries, prompts, labels) its completions would be the prompts; it must get TRL's keyword call instead.
    src = FunctionReward(write(TRL_DOC_STYLE), label_key="answer")
    assert src.contracts == ["trl"]
    res = score_batch(src, batch())
    (call,) = src.fn.__globals__["CALLS"]
    assert call["prompts"] == PROMPTS and call["completions"] == COMPLETIONS and call["answer"] == LABELS
    assert call["completion_ids"] == [[5, 6, 7], [8, 2]]
    assert call["trainer_state"].global_step == 3 and call["trainer_state"].max_steps == 10
    assert callable(call["log_extra"]) and callable(call["log_metric"])
    assert set(call) == {
        "prompts",
        "completions",
        "answer",
        "completion_ids",
        "trainer_state",
        "log_extra",
        "log_metric",
    }
    assert res.rewards == res.scores == [1.0, 0.0]
    assert res.extra_logs["my_metric"] == [0.5, 0.5] and res.extra_logs["reward/reward_func"] == [1.0, 0.0]


def chat_rows() -> list[dict]:
    """Rows whose prompt the data gave as a message list (TRL's conversational format)."""
    return [
        {"prompt": p, "label": lab, "raw_prompt": [{"role": "user", "content": p}]}
        for p, lab in zip(PROMPTS, LABELS, strict=True)
    ]


@pytest.mark.parametrize("conversational", [False, True], ids=["string prompt", "message-list prompt"])
def test_trl_functions_get_the_rows_columns_and_completions_in_the_datas_format(write, conversational):
    """TRL's rule: the data's format decides, whatever template rendered the prompt for the policy."""
    path = write(TRL_DOC_STYLE)
    src = FunctionReward(path)
    rows = [
        {
            "prompt": f"<|user|>\nraw {i}<|end|>\n",  # rendered with the chat template for the policy
            "label": "x",
            "raw_prompt": [{"role": "user", "content": f"raw {i}"}] if conversational else f"raw {i}",
            "columns": {"answer": a, "level": i},
        }
        for i, a in enumerate(LABELS)
    ]
    score_batch(src, batch(rows=rows))
    (call,) = src.fn.__globals__["CALLS"]
    assert call["answer"] == LABELS and call["level"] == [0, 1]
    if conversational:
        assert call["prompts"][0] == [{"role": "user", "content": "raw 0"}]  # the prompt before its chat template
        assert call["completions"][1] == [{"role": "assistant", "content": "6"}]
    else:
        assert call["prompts"] == ["raw 0", "raw 1"] and call["completions"] == COMPLETIONS


# TRL's documentation's examples (GRPOTrainer, "Using a custom reward function"), as a user copies them.
TRL_DOC_EXAMPLES = r"""
    import re

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(completion)) for completion in completions]

    def reward_func(completions, ground_truth, **kwargs):
        # Regular expression to capture content inside \boxed{}
        matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
        contents = [match.group(1) if match else "" for match in matches]
        # Reward 1 if the content is the same as the ground truth, 0 otherwise
        return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]

    def format_reward_func(completions, **kwargs):
        pattern = r"^<think>.*?</think><answer>.*?</answer>$"
        completion_contents = [completion[0]["content"] for completion in completions]
        matches = [re.match(pattern, content) for content in completion_contents]
        return [1.0 if match else 0.0 for match in matches]
"""


def test_trls_documentation_examples_score_standard_and_conversational_data(write):
    path = write(TRL_DOC_EXAMPLES, "trl_docs.py")
    completions = ["The sum is \\boxed{4}", "<think>3+3</think><answer>6</answer>"]
    standard = batch(completions=completions, rows=[{"raw_prompt": p} for p in PROMPTS], labels=["4", "7"])
    len_src = FunctionReward(f"{path}:reward_len")
    assert score_batch(len_src, standard).rewards == [-abs(20 - len(c)) for c in completions]
    boxed = FunctionReward(f"{path}:reward_func", label_key="ground_truth")
    assert score_batch(boxed, standard).rewards == [1.0, 0.0]
    fmt = FunctionReward(f"{path}:format_reward_func")
    assert score_batch(fmt, batch(completions=completions, rows=chat_rows())).rewards == [0.0, 1.0]


def test_a_trl_function_missing_its_column_is_named(write):
    src = FunctionReward(write(TRL_DOC_STYLE), label_key="label")
    with pytest.raises(
        RewardError, match=r"my_reward\.py \(trl contract\) requires answer, which the data has no column"
    ):
        score_batch(src, batch())


def test_trls_own_reward_functions_score_through_the_loader():
    pytest.importorskip("trl")
    from trl.rewards import accuracy_reward, get_soft_overlong_punishment, think_format_reward

    conversational = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    b = batch(labels=["$4$", "$7$"], completion_ids=[[1] * 1100, [1] * 1300], rows=chat_rows())
    for ref, expected in [
        ("trl.rewards.think_format_reward", think_format_reward(conversational)),
        ("think_format_reward", think_format_reward(conversational)),  # TRL's CLI short name
        ("trl.rewards.accuracy_reward", accuracy_reward(conversational, solution=["$4$", "$7$"])),
        (
            "get_soft_overlong_punishment",  # TRL's CLI fixes 1280 / 256
            get_soft_overlong_punishment(1280, 256)(completion_ids=b.completion_ids),
        ),
    ]:
        src = FunctionReward(ref, label_key="solution")
        assert src.contracts == ["trl"], ref
        assert score_batch(src, b).rewards == pytest.approx(expected), ref
    assert think_format_reward(conversational) == [1.0, 0.0]  # the cases differ, so the comparison means something


def test_a_weighted_list_sums_what_each_function_scored_and_none_drops_a_function(write):
    pytest.importorskip("trl")
    declines = write(
        """
        def partial(completions, **kwargs):
            return [None, 2.0]
        """,
        "partial.py",
    )
    src = FunctionReward([f"{declines}:partial", "trl.rewards.think_format_reward"], weights=[0.5, 3.0])
    res = score_batch(src, batch(rows=chat_rows()))
    assert res.rewards == [3.0 * 1.0, 0.5 * 2.0 + 3.0 * 0.0]
    assert math.isnan(res.extra_logs["reward/partial"][0]) and res.extra_logs[UNSCORED_LOG] == [0.0, 0.0]


def test_a_sample_every_function_declines_gets_its_groups_mean_and_is_counted(write):
    path = write(
        """
        def reward_func(completions, **kwargs):
            return [None, 1.0, 3.0, None]
        """
    )
    b = batch(
        queries=["a"] * 4, prompts=["p"] * 4, responses=["r"] * 4, labels=["l"] * 4, completions=["c"] * 4,
        rows=[], completion_ids=[], group_size=2,
    )  # fmt: skip
    res = score_batch(FunctionReward(path), b)
    assert res.rewards == [1.0, 1.0, 3.0, 3.0]  # advantage 0 under a mean baseline, the group's mean unchanged
    assert res.extra_logs[UNSCORED_LOG] == [1.0, 0.0, 0.0, 1.0]


def test_normalize_then_sum_zscores_each_function_in_its_group(write):
    path = write(
        """
        def a(completions, **kwargs):
            return [1.0, 3.0, 0.0, 0.0]

        def b(completions, **kwargs):
            return [2.0, 2.0, 5.0, 1.0]
        """
    )
    b = batch(
        queries=["q"] * 4, prompts=["p"] * 4, responses=["r"] * 4, labels=["l"] * 4, completions=["c"] * 4,
        rows=[], completion_ids=[], group_size=2,
    )  # fmt: skip
    res = score_batch(
        FunctionReward([f"{path}:a", f"{path}:b"], weights=[1.0, 2.0], aggregation="normalize_then_sum"), b
    )
    za = 1.0 / (math.sqrt(2.0) + 1e-4)  # a's group (1, 3): deviations 1, unbiased std sqrt(2); (0, 0): all 0
    zb = 2.0 / (math.sqrt(8.0) + 1e-4)  # b's group (5, 1): deviations 2, unbiased std sqrt(8); (2, 2): all 0
    assert res.rewards == pytest.approx([-za, za, 2.0 * zb, -2.0 * zb])
    assert res.scores == [1.0 + 4.0, 3.0 + 4.0, 0.0 + 10.0, 0.0 + 2.0]  # the weighted sum of the raw values


def test_async_trl_functions_run_together(write):
    path = write(
        """
        import asyncio
        STARTED = []

        async def slow(completions, **kwargs):
            STARTED.append("slow")
            await asyncio.sleep(0)
            assert "fast" in STARTED  # the other function started before this one finished
            return [1.0] * len(completions)

        async def fast(completions, **kwargs):
            STARTED.append("fast")
            return [2.0] * len(completions)
        """
    )
    res = score_batch(FunctionReward([f"{path}:slow", f"{path}:fast"]), batch())
    assert res.rewards == [3.0, 3.0]


VERL_FILE = """
    CALLS = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        CALLS.append((data_source, solution_str, ground_truth, dict(extra_info)))
        return {"score": float(solution_str.endswith(ground_truth)), "acc": 1.0}
"""


def test_verl_compute_score_is_called_per_sample_with_its_keywords(write):
    path = write(VERL_FILE)
    src = FunctionReward(f"{path}:compute_score")
    assert src.contracts == ["verl"]
    rows = [
        {"prompt": p, "label": lab, "datasource": "openai/gsm8k", "columns": {"extra_info": {"index": i}}}
        for i, (p, lab) in enumerate(zip(PROMPTS, LABELS, strict=True))
    ]
    res = score_batch(src, batch(rows=rows))
    calls = src.fn.__globals__["CALLS"]
    assert [c[:3] for c in calls] == [("openai/gsm8k", COMPLETIONS[0], "4"), ("openai/gsm8k", COMPLETIONS[1], "7")]
    assert calls[0][3] == {"index": 0, "num_turns": None, "rollout_reward_scores": {}}
    assert res.rewards == [1.0, 0.0] and res.extra_logs == {"acc": [1.0, 1.0]}
    assert FunctionReward(path).contracts == ["verl"]  # FILE.py alone: compute_score is found by its name


def test_veRLs_default_scorer_by_import_path_scores_per_data_source():
    src = FunctionReward("verl.utils.reward_score.default_compute_score")  # our reproduction where veRL is absent
    assert src.contracts == ["verl"]
    res = score_batch(src, batch(completions=["so #### 4", "#### 6"]))
    assert res.rewards == [1.0, 0.0]


def test_an_openrlhf_file_is_still_called_positionally(write):
    path = write("def reward_func(queries, prompts, labels, **kwargs):\n    return [float(len(q)) for q in queries]\n")
    src = FunctionReward(path)
    assert src.contracts == ["openrlhf"]
    assert score_batch(src, batch()).rewards == [
        float(len(PROMPTS[0] + RESPONSES[0])),
        float(len(PROMPTS[1] + RESPONSES[1])),
    ]


AMBIGUOUS = """\
def reward_func(**kwargs):
    if "solution_str" in kwargs:  # veRL's call: one sample
        return 0.25
    return [0.5] * len(kwargs["completions"])
"""


def test_an_ambiguous_signature_is_refused_naming_the_choices_and_the_contract_key_forces_one(write):
    path = write(AMBIGUOUS)
    with pytest.raises(RewardError) as e:
        FunctionReward(path)
    message = str(e.value)
    assert "(**kwargs) fits verl and trl alike" in message
    assert all(f"reward.contract={n}" in message for n in ("openrlhf", "verl", "trl")), message
    assert score_batch(FunctionReward(path, contract="trl"), batch()).rewards == [0.5, 0.5]
    assert score_batch(FunctionReward(path, contract="verl"), batch()).rewards == [0.25, 0.25]


def test_markers_of_two_contracts_are_refused_and_a_forced_contract_that_cannot_bind_is_named(write):
    both = write("def reward_func(prompts, completions, labels, **kwargs):\n    return [0.0]\n")
    with pytest.raises(
        RewardError, match=r"names parameters of several contracts: openrlhf \(labels\); trl \(completions\)"
    ):
        FunctionReward(both)
    plain = write("def reward_func(queries, prompts, labels):\n    return [0.0]\n", "plain.py")
    with pytest.raises(RewardError, match=r"reward.contract=trl, but it has no \*\*kwargs"):
        FunctionReward(plain, contract="trl")


def test_the_schemas_contract_names_are_the_registrys():
    assert set(REWARD_CONTRACTS) == {"auto", *CONTRACTS}


def test_the_static_check_names_the_contract_it_found_and_the_fix_when_none_fits(write):
    from rlhf.planning.preflight.python_files import check_reward_file, check_reward_functions

    trl_file, verl_file = write(TRL_DOC_STYLE, "t.py"), write(VERL_FILE, "v.py")
    found, seen = check_reward_functions([trl_file, f"{verl_file}:compute_score", "trl.rewards.accuracy_reward"])
    assert found == [] and seen == [
        f"{trl_file}:reward_func (trl)",
        f"{verl_file}:compute_score (verl)",
        "trl.rewards.accuracy_reward",
    ]
    (finding,) = check_reward_file(write("def reward_func(x):\n    return x\n", "bad.py"))
    assert "reward_func takes 1 positional (x)" in finding.problem
    assert "def compute_score(data_source, solution_str, ground_truth" in finding.fix
    assert "def f(prompts, completions, completion_ids, **kwargs)" in finding.fix
    (finding,) = check_reward_file(write(AMBIGUOUS, "amb.py"))
    assert (
        "line 1: reward_func(**kwargs) fits verl and trl alike; set one of reward.contract=openrlhf" in finding.problem
    )
    assert finding.warning  # reward.contract may choose one; the load at start-up refuses it where it does not
    assert check_reward_file(write(AMBIGUOUS, "amb2.py"), "trl") == []


def test_validation_reads_a_list_of_references_and_their_weights(write, tmp_path):
    from rlhf.spec.build import load_spec
    from rlhf.spec.validate import validate

    good = write(TRL_DOC_STYLE)
    spec = load_spec(
        ["+recipe=grpo_tiny_cpu", "reward.verifier=", f"reward.function=[{good},trl.rewards.think_format_reward]",
         "reward.weights=[1.0,2.0,3.0]"]
    )  # fmt: skip
    assert spec.reward.functions() == [good, "trl.rewards.think_format_reward"]
    errors = {e.key: str(e) for e in validate(spec)}
    assert "one weight per reward.function entry (2)" in errors["reward.weights"]
    missing = str(tmp_path / "gone.py")
    spec = load_spec(["+recipe=grpo_tiny_cpu", "reward.verifier=", f"reward.function=[{good},{missing}:f]"])
    assert "no such file" in {e.key: str(e) for e in validate(spec)}["reward.function[1]"]


def test_asyncio_loop_inside_a_running_loop_still_awaits(write):
    path = write("async def f(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    src = FunctionReward(f"{path}:f")

    async def inside() -> list[float]:
        return score_batch(src, batch()).rewards

    assert asyncio.run(inside()) == [1.0, 1.0]


def test_the_pipeline_reads_the_group_size_from_the_repeated_prompt_records():
    from rlhf.pipelines.rl_generation import _group_size

    a, b = {"prompt": "a"}, {"prompt": "a"}  # equal but distinct records: two prompts
    assert _group_size([a, a, a, b, b, b]) == 3 and _group_size([a, b]) == 1 and _group_size([a]) == 1
