"""Built-in verifiers: first-token matching, format credit, math answers (math-verify, bounded in time), format."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlhf.rewards import RewardError, verify
from rlhf.rewards.math_answer import extract_boxed, gold_answer
from rlhf.rewards.verifiers import exact_verifier, first_token, format_verifier, math_verifier


@pytest.mark.parametrize(
    ("response", "label", "reward", "score"),
    [
        ("7", "7", 1.0, 1.0),
        ("  7 ", "7", 1.0, 1.0),
        ("7<|end|>", "7", 1.0, 1.0),  # a trailing eos / end-of-turn token is not part of the answer
        ("7. Because 3+4=7", "7", 1.0, 1.0),  # first-token match
        ("77", "7", 0.1, 0.0),  # a number, but another one: format credit only
        ("3<|end|>", "7", 0.1, 0.0),
        ("seven", "7", 0.0, 0.0),  # not a number: nothing
        ("x7", "7", 0.0, 0.0),
        ("Paris", "Paris", 1.0, 1.0),
        ("paris", "Paris", 0.0, 0.0),  # no format credit for words
    ],
)
def test_exact_matches_whole_or_first_token_with_format_credit_for_numbers(response, label, reward, score):
    got = exact_verifier(response, label)
    assert got[:2] == (reward, score)


def test_exact_format_credit_can_be_switched_off_and_logs_both_match_kinds():
    assert exact_verifier("6", "7", format_credit=0.0)[0] == 0.0
    assert exact_verifier("7 ok", "7")[2] == {"exact_match": 0.0, "first_token_match": 1.0}


def test_first_token_stops_at_spaces_tags_and_punctuation():
    assert [first_token(t) for t in (" 7. Done", "42<|end|>", "x, y", "", "3.5 m")] == ["7", "42", "x", "", "3.5"]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("\\boxed{a} then \\boxed{b}", "b"),
        ("\\boxed{x^{2}+1}", "x^{2}+1"),
        ("\\boxed 5$", "5"),
        ("\\boxed{unbalanced", None),
        ("no box", None),
    ],
)
def test_boxed_extraction_takes_the_last_balanced_box(text, answer):
    assert extract_boxed(text) == answer


def test_gold_answer_of_a_worked_solution():
    assert gold_answer("2 + 2 is 4 #### 4") == "4"
    assert gold_answer("so the total is \\boxed{12}.") == "12"
    assert gold_answer(" 3/4 ") == "3/4"


@pytest.mark.parametrize(
    ("response", "label", "correct"),
    [
        ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1.0),  # equivalent fractions
        ("The answer is 1/2", "0.5", 1.0),  # plain vs decimal
        ("$\\dfrac12$", "1/2", 1.0),  # LaTeX shorthand vs plain
        ("0.25", "\\frac{1}{4}", 1.0),
        ("1,234", "1234", 1.0),  # thousands separator
        ("x = 5", "5", 1.0),
        ("50\\%", "50", 1.0),
        ("\\boxed{x^2+1}", "1+x^2", 1.0),  # symbolic
        ("\\boxed{\\sqrt{2}}", "2^{1/2}", 1.0),
        ("\\boxed{(1,2)}", "(1, 2)", 1.0),  # an interval
        ("I get 3 then 5 apples", "5", 1.0),  # no box: the last number
        ("first \\boxed{3}, finally \\boxed{4}", "4", 1.0),  # the last box counts
        ("first \\boxed{4}, finally \\boxed{3}", "4", 0.0),
        ("... so \\boxed{4}", "First 2+2=4. #### 4", 1.0),  # a GSM8K solution as the label
        ("7<|end|>", "7", 1.0),  # a trailing special token is not part of the answer
        ("-2", "2", 0.0),  # wrong answers
        ("3.0001", "3", 0.0),
        ("4", "-4", 0.0),
        ("\\boxed{12", "12", 0.0),  # an unbalanced box is no answer
        ("garbage %%% {{{", "3", 0.0),
        ("", "3", 0.0),
    ],
)
def test_math_verifier_on_answer_pairs(response, label, correct):
    reward, score, logs = math_verifier(response, label)
    assert (reward, score) == (correct, correct)
    assert logs["verifier_timeout"] == 0.0


def test_math_verifier_says_when_no_answer_was_found():
    assert math_verifier("I am not sure", "4")[2] == {"answer_found": 0.0, "verifier_timeout": 0.0}
    assert math_verifier("it is 5", "4")[2]["answer_found"] == 1.0


def test_math_check_that_runs_too_long_scores_zero_is_counted_and_the_next_check_works():
    # sympy evaluates the tower of powers for ever; math-verify's alarm is off, our deadline stops it
    started = time.monotonic()
    res = verify("math", ["q"] * 2, ["p"] * 2, ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{5}"], ["5", "5"], timeout_s=1.0)
    assert res.scores == [0.0, 1.0]
    assert res.extra_logs["verifier_timeout"] == [1.0, 0.0]
    assert time.monotonic() - started < 60  # bounded: one deadline plus a checker restart


def test_math_verifier_works_off_the_main_thread():
    # math-verify's own signal.alarm timeout raises off the main thread; rewards are scored in threads
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda r: math_verifier(r, "\\frac{1}{2}"), ["\\boxed{0.5}", "1/3", "2/4"]))
    assert [r[1] for r in results] == [1.0, 0.0, 1.0]


def test_format_verifier_default_is_the_r1_format_and_takes_a_pattern():
    assert format_verifier("<think>hmm</think> <answer>4</answer>", "")[0] == 1.0
    assert format_verifier("<answer>4</answer>", "")[0] == 0.0
    assert format_verifier("ANSWER: 4", "", pattern=r"^ANSWER: \d+$")[0] == 1.0


def test_verify_scores_a_batch_and_names_unknown_verifiers():
    res = verify("exact", ["q1", "q2"], ["p1", "p2"], ["7", "x"], ["7", "7"])
    assert res.rewards == [1.0, 0.0] and res.scores == [1.0, 0.0]
    assert res.extra_logs["first_token_match"] == [1.0, 0.0] and len(res) == 2
    with pytest.raises(RewardError, match="unknown verifier.*exact, format, math, reasoning_gym"):
        verify("regex", ["q"], ["p"], ["r"], ["l"])


def test_verifiers_that_need_labels_say_which_setting_is_missing():
    with pytest.raises(RewardError, match="data.label_key"):
        verify("exact", ["q"], ["p"], ["7"], [""])
    with pytest.raises(RewardError, match="data.label_key"):
        verify("math", ["q"], ["p"], ["7"], [None])
