"""Built-in verifiers: answer extraction, equivalence, first-token matching, format credit, format."""

from __future__ import annotations

import pytest

from rlhf.rewards import RewardError, verify
from rlhf.rewards.math_answer import answers_equal, extract_answer, extract_boxed, gold_answer
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
        ("The work... #### 1,234", "1,234"),
        ("Thus the answer is 12.", "12"),
        ("I get 3 then 5 apples", "5"),
        ("no numbers here", None),
        ("\\boxed{unbalanced", None),
    ],
)
def test_answer_extraction_order(text, answer):
    assert extract_answer(text) == answer


def test_boxed_with_nested_braces_and_space_form():
    assert extract_boxed("\\boxed{x^{2}+1}") == "x^{2}+1"
    assert extract_boxed("\\boxed 5$") == "5"


@pytest.mark.parametrize(
    ("predicted", "gold", "same"),
    [
        ("1,234", "1234", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\dfrac12", "0.5", True),
        ("1/4", "0.25", True),
        ("x = 5", "5", True),
        ("\\text{5 }", "5", True),
        ("50\\%", "50", True),
        ("3.0001", "3", False),
        ("-2", "2", False),
        (None, "2", False),
    ],
)
def test_answer_equivalence(predicted, gold, same):
    assert answers_equal(predicted, gold) is same


def test_math_verifier_reads_worked_solutions_as_labels():
    assert gold_answer("2 + 2 is 4 #### 4") == "4"
    assert math_verifier("... so \\boxed{4}", "First... #### 4")[:2] == (1.0, 1.0)
    assert math_verifier("I am not sure", "4") == (0.0, 0.0, {"answer_found": 0.0})


def test_format_verifier_default_is_the_r1_format_and_takes_a_pattern():
    assert format_verifier("<think>hmm</think> <answer>4</answer>", "")[0] == 1.0
    assert format_verifier("<answer>4</answer>", "")[0] == 0.0
    assert format_verifier("ANSWER: 4", "", pattern=r"^ANSWER: \d+$")[0] == 1.0


def test_verify_scores_a_batch_and_names_unknown_verifiers():
    res = verify("exact", ["q1", "q2"], ["p1", "p2"], ["7", "x"], ["7", "7"])
    assert res.rewards == [1.0, 0.0] and res.scores == [1.0, 0.0]
    assert res.extra_logs["first_token_match"] == [1.0, 0.0] and len(res) == 2
    with pytest.raises(RewardError, match="unknown verifier.*exact, format, math"):
        verify("regex", ["q"], ["p"], ["r"], ["l"])


def test_verifiers_that_need_labels_say_which_setting_is_missing():
    with pytest.raises(RewardError, match="data.label_key"):
        verify("exact", ["q"], ["p"], ["7"], [""])
    with pytest.raises(RewardError, match="data.label_key"):
        verify("math", ["q"], ["p"], ["7"], [None])
