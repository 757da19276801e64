"""reasoning_gym:TASK sources: generated rows for RL and SFT, their parsing, and the errors a new user meets."""

from __future__ import annotations

import json

import pytest

from rlhf.data import DataError, build_prompts, build_sft, load_rows
from rlhf.spec.build import load_spec
from rlhf.spec.reasoning_gym_source import SourceError, parse_source
from rlhf.spec.validate import validate

pytest.importorskip("reasoning_gym")

ARITH = "reasoning_gym:basic_arithmetic?size=20&seed=1&min_terms=2&max_terms=2&max_digits=1"


def test_source_options_are_parsed_with_size_seed_and_task_options():
    src = parse_source("reasoning_gym:basic_arithmetic?size=20&seed=3&max_terms=2&operators=%2B-&allow_negation=false")
    assert (src.task, src.size, src.seed) == ("basic_arithmetic", 20, 3)
    assert src.options == {"max_terms": 2, "operators": "+-", "allow_negation": False}
    assert parse_source("reasoning_gym:leg_counting").config() == {"size": 1000, "seed": 0}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("reasoning_gym:", "name a task"),
        ("reasoning_gym:leg_counting?size=0", "size=0 must be a whole number >= 1"),
        ("reasoning_gym:leg_counting?seed=x", "seed='x' must be a whole number"),
        ("reasoning_gym:leg_counting?size", "not OPTION=VALUE"),
    ],
)
def test_malformed_sources_say_what_is_wrong(source, message):
    with pytest.raises(SourceError, match=message):
        parse_source(source)


def test_rows_carry_question_answer_task_label_and_the_task_as_datasource():
    rows = load_rows([ARITH, "reasoning_gym:leg_counting?size=5&seed=2"])
    assert len(rows) == 25
    first = rows[0]
    assert first["input"].startswith("Calculate ") and first["datasource"] == "basic_arithmetic"
    label = json.loads(first["label"])
    assert (label["task"], label["index"], label["answer"]) == ("basic_arithmetic", 0, first["output"])
    assert rows[20]["datasource"] == "leg_counting"
    # generated, so the same source gives the same rows every time
    assert load_rows([ARITH])["input"] == rows.select(range(20))["input"]


def test_the_same_source_serves_rl_prompts_and_sft_pairs(spec, tokenizer):
    rows = load_rows([ARITH])
    prompts = build_prompts(spec(label_key="label", max_len=128), tokenizer, rows)
    assert prompts[0]["datasource"] == "basic_arithmetic" and json.loads(prompts[0]["label"])["task"]
    sft = build_sft(spec(family="sft", output_key="output", max_len=128), tokenizer, rows)
    answer = rows[0]["output"]
    trained = [t for t, m in zip(sft[0]["input_ids"], sft[0]["loss_mask"], strict=True) if m]
    assert tokenizer.decode(trained) == f"{answer}<|end|>"


def test_loading_an_unknown_task_names_the_known_ones():
    with pytest.raises(DataError, match="unknown reasoning-gym task 'basic_arithmatic'.*basic_arithmetic"):
        load_rows(["reasoning_gym:basic_arithmatic?size=5"])


def _errors(*overrides: str) -> dict[str, str]:
    return {e.key: e.fix for e in validate(load_spec(list(overrides)))}


def test_validation_accepts_the_form_and_refuses_unknown_tasks_and_options():
    ok = _errors(f"data.train_files=[{ARITH},reasoning_gym:leg_counting?size=500]", "data.label_key=label")
    assert not any(k.startswith("data.") for k in ok)
    errs = _errors("data.train_files=[reasoning_gym:leg_countin?size=5,reasoning_gym:leg_counting?legs=3]")
    assert "unknown reasoning-gym task 'leg_countin'" in errs["data.train_files[0]"]
    assert "leg_counting" in errs["data.train_files[0]"]
    assert "no option legs; its options: min_animals" in errs["data.train_files[1]"]


def test_validation_refuses_eval_rows_drawn_from_the_training_seeds():
    errs = _errors(
        "data.train_files=[reasoning_gym:leg_counting?size=100&seed=1]",
        "data.eval_files=[reasoning_gym:leg_counting?size=10&seed=50]",
    )
    assert "give it seed=101 or higher" in errs["data.eval_files[0]"]
    assert "data.eval_files[0]" not in _errors(
        "data.train_files=[reasoning_gym:leg_counting?size=100&seed=1]",
        "data.eval_files=[reasoning_gym:leg_counting?size=10&seed=101]",
    )


def test_the_reasoning_gym_verifier_needs_the_label_column():
    errs = _errors(f"data.train_files=[{ARITH}]", "reward.verifier=reasoning_gym")
    assert "data.label_key=label" in errs["data.label_key"]


def test_a_missing_extra_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # what an install without the extra looks like
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)
    errs = _errors(f"data.train_files=[{ARITH}]")
    assert 'pip install "rlhf[reasoning]"' in errs["data.train_files[0]"]


def test_command_line_sources_are_quoted_for_hydra_and_nothing_else_is():
    from rlhf.spec.reasoning_gym_source import quote_sources

    given = ["data.train_files=[reasoning_gym:chain_sum?size=5&seed=1,builtin:arith]", "seed=3"]
    assert quote_sources(given) == [
        'data.train_files=["reasoning_gym:chain_sum?size=5&seed=1",builtin:arith]',
        "seed=3",
    ]
    already = 'data.eval_files=["reasoning_gym:chain_sum?size=5&seed=9"]'
    assert quote_sources([already]) == [already]
