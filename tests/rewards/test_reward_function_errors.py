"""A reward function that raises: the message names the line in the user's file and the sample that broke it (found
by calling the function on that batch's samples one at a time), and the error carries the full traceback, which the
run folder keeps."""

from __future__ import annotations

import pickle
import textwrap

import pytest

from rlhf.rewards import FunctionReward, RewardError
from rlhf.rewards.failure import TRACEBACK_FILE, find_failing_sample

PROMPTS = ["What is 1+1?", "What is 2+2?", "What is 3+3?", "What is 4+4?"]
RESPONSES = [" 2", " 4", " six", " 8"]
LABELS = ["2", "4", "6", "8"]
QUERIES = [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]

# Sample 2's response has no digits: int() raises on line 7 of the file (the line numbers below are the file's).
PARSES_THE_RESPONSE = """\
CALLS = []


def reward_func(queries, prompts, labels, responses):
    CALLS.append(len(queries))
    return [
        float(int(r.strip()) == int(label))
        for r, label in zip(responses, labels)
    ]
"""
RAISING_LINE = 7


def _reward(tmp_path, body: str, name: str = "my_reward.py") -> tuple[FunctionReward, str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return FunctionReward(str(path)), str(path)


def _fail(src: FunctionReward, prompts=PROMPTS, responses=RESPONSES, labels=LABELS) -> RewardError:
    queries = [p + r for p, r in zip(prompts, responses, strict=True)]
    with pytest.raises(RewardError) as e:
        src.score(queries, prompts, responses, labels)
    return e.value


def test_the_message_names_the_line_in_the_users_file_and_the_sample_that_broke_it(tmp_path):
    src, path = _reward(tmp_path, PARSES_THE_RESPONSE)
    err = _fail(src)
    msg = str(err)
    # the frame is the comprehension's (<listcomp>; reward_func itself on Python 3.12, which inlines them)
    assert msg.startswith(f"reward function {path}, line {RAISING_LINE} (in "), msg
    assert ": `float(int(r.strip()) == int(label))`)" in msg  # the raising line's code
    assert "raised ValueError: invalid literal for int() with base 10: 'six'" in msg
    assert "on sample 2 of a batch of 4: prompt 'What is 3+3?', response ' six', label '6'" in msg
    assert "\n" not in msg
    # The search stopped at the first sample that raised alone: the batch, then samples 0, 1 and 2.
    assert src.fn.__globals__["CALLS"] == [4, 1, 1, 1]
    assert isinstance(err.__cause__, ValueError)  # the batch's own error stays the cause


def test_the_traceback_has_the_users_frames_and_the_whole_sample(tmp_path):
    src, path = _reward(tmp_path, PARSES_THE_RESPONSE)
    long_prompt = "Q" * 500 + " What is 3+3?"
    err = _fail(src, prompts=[PROMPTS[0], long_prompt], responses=RESPONSES[1:3], labels=LABELS[1:3])
    text = err.traceback_text
    assert f'File "{path}", line {RAISING_LINE}' in text and "ValueError: invalid literal" in text
    assert long_prompt in text and "' six'" not in text and "\n six\n" in text  # whole, unquoted
    assert "During handling of the above exception" not in text  # the sample's own error, not chained to the batch's
    # the one line shows it cut short, with its length
    assert f"prompt {'Q' * 200!r}… ({len(long_prompt)} chars), response ' six'" in str(err)


def test_the_line_is_the_users_call_when_a_library_raises(tmp_path):
    src, path = _reward(
        tmp_path,
        """\
        import json


        def reward_func(queries, prompts, labels):
            return [float(json.loads(label)["answer"]) for label in labels]
        """,
    )
    err = _fail(src, labels=['{"answer": 2}', "{'answer': 4}", '{"answer": 6}', '{"answer": 8}'])
    msg = str(err)
    assert f"{path}, line 5 " in msg and "raised JSONDecodeError" in msg, msg  # not a line inside json/decoder.py
    assert "on sample 1 of a batch of 4" in msg and "label \"{'answer': 4}\"" in msg


def test_an_async_reward_funcs_line_and_sample_are_found_too(tmp_path):
    src, path = _reward(
        tmp_path,
        """\
        async def reward_func(queries, prompts, labels):
            out = []
            for label in labels:
                out.append(1.0 / (int(label) - 4))
            return out
        """,
    )
    msg = str(_fail(src))
    assert f"{path}, line 4 (in reward_func: `out.append(1.0 / (int(label) - 4))`)" in msg, msg
    assert "raised ZeroDivisionError: float division by zero on sample 1 of a batch of 4" in msg


def test_a_failure_only_the_whole_batch_shows_says_so_and_shows_the_first_sample(tmp_path):
    src, path = _reward(
        tmp_path,
        """\
        def reward_func(queries, prompts, labels):
            if len(queries) > 1:
                raise RuntimeError("batches of more than one\\nare not supported")
            return [0.0]
        """,
    )
    msg = str(_fail(src))
    assert msg.startswith(f"reward function {path}, line 3 (in reward_func"), msg
    assert "raised RuntimeError: batches of more than one are not supported on the whole batch of 4 samples" in msg
    assert "but on none of them alone; the first sample: prompt 'What is 1+1?', response ' 2', label '2'" in msg


def test_the_search_for_the_sample_is_bounded_in_time():
    calls = []
    found = find_failing_sample(calls.append, 4, KeyError("x"), budget_s=0)
    assert (found.index, found.tried, calls) == (None, 1, [0])  # one try, then the budget was spent


def test_the_run_folder_keeps_the_traceback_and_the_message_names_it_before_the_resume_hint(tmp_path):
    from rlhf.pipelines.lifecycle import with_hint

    src, path = _reward(tmp_path, PARSES_THE_RESPONSE)
    err = _fail(src)
    headline = str(err)
    hint = "the last checkpoint is C; resume with: rlhf-run --resume R"
    with_hint(err, hint)  # what the run lifecycle adds
    # The error crosses a Ray actor's boundary by pickle: the traceback text goes with it.
    err = pickle.loads(pickle.dumps(err))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    msg = err.keep_traceback(run_dir)
    kept = run_dir / TRACEBACK_FILE
    assert msg == f"{headline}; the full traceback is in {kept}; {hint}"
    assert f'File "{path}", line {RAISING_LINE}' in kept.read_text()


def test_an_error_without_a_traceback_writes_nothing(tmp_path):
    err = RewardError("reward endpoint http://x answered HTTP 500")
    assert err.keep_traceback(tmp_path) == str(err) and not (tmp_path / TRACEBACK_FILE).exists()
