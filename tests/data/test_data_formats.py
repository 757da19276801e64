"""Which keys a layout's columns fill in (rlhf.spec.data_formats, torch-free), and the checks before start-up (the
preflight and the run's row check) reading TRL and veRL files as the row builders will."""

from __future__ import annotations

import dataclasses

import pytest
from verl_gsm8k_layout import RAW

from rlhf.data.errors import DataError
from rlhf.data.row_check import check_rows
from rlhf.planning.preflight.data_files import check_data_files
from rlhf.spec.data_formats import resolve_keys
from rlhf.spec.schema import DataSpec

VERL = {"data_source": None, "prompt": None, "ability": None, "reward_model": ["style", "ground_truth"]}
VERL_RL = {"input_key": "prompt", "label_key": "reward_model.ground_truth", "datasource_key": "data_source"}
VERL_SFT = {"input_key": "extra_info.question", "output_key": "extra_info.answer"}
KTO = {"input_key": "prompt", "output_key": "completion", "label_key": "label"}


@pytest.mark.parametrize(
    ("kind", "shape", "given", "filled"),
    [
        ("prompt", VERL, {}, VERL_RL),
        ("prompt", VERL, {"label_key": "ability"}, {"input_key": "prompt", "datasource_key": "data_source"}),
        ("prompt", {"prompt": None, "solution": None}, {}, {"input_key": "prompt"}),
        ("prompt", {"input": None, "prompt": None}, {}, {}),
        ("prompt", {"prompt": None, "q": None}, {"input_key": "q"}, {}),
        ("sft", {"prompt": None, "completion": None}, {}, {"input_key": "prompt", "output_key": "completion"}),
        ("sft", {"messages": None}, {}, {"input_key": "messages", "multiturn": True}),
        ("sft", {"conversations": None}, {}, {"input_key": "conversations", "multiturn": True}),
        ("sft", {"text": None}, {}, {"input_key": "text", "pretrain_mode": True}),
        ("sft", {"text": None}, {"output_key": "y"}, {}),
        ("sft", {"extra_info": ["question", "answer"]}, {}, VERL_SFT),
        ("preference", {"prompt": None, "chosen": None, "rejected": None}, {}, {"prompt_key": "prompt"}),
        ("preference", {"chosen": None, "rejected": None}, {}, {}),
        ("kto", {"prompt": None, "completion": None, "label": None}, {}, KTO),
    ],
)  # fmt: skip
def test_only_keys_left_at_their_defaults_are_filled_from_the_columns(kind, shape, given, filled):
    resolved = resolve_keys(DataSpec(**given), kind, shape)
    assert resolved.filled == filled
    for key, value in {**given, **filled}.items():
        assert getattr(resolved.data, key) == value


def _rl(spec, path, **data):
    return spec(train_files=[path], **data)


def test_the_checks_before_start_read_a_trl_file_by_its_own_columns(spec, write_jsonl):
    path = write_jsonl([{"prompt": "2+3=", "solution": "5"}, {"solution": "6"}])
    findings = check_data_files(_rl(spec, path))
    assert [f.problem for f in findings] == ["row 1 (line 2) has no value for column 'prompt' (data.input_key)"]
    with pytest.raises(DataError, match=r"row 1 \(line 2\): key 'prompt': missing \(row has \['solution'\]\)"):
        check_rows(_rl(spec, path))


def test_the_checks_before_start_read_a_verl_sft_file_by_its_struct_column(spec, write_jsonl):
    row = {"data_source": "openai/gsm8k", "extra_info": {"question": RAW[0]["question"], "answer": RAW[0]["answer"]}}
    path = write_jsonl([row, {"data_source": "openai/gsm8k"}])
    (finding,) = check_data_files(spec("sft", train_files=[path]))
    assert finding.problem == "row 1 (line 2) has no value for column 'extra_info' (data.input_key, data.output_key)"


def test_the_checks_before_start_need_a_dotted_keys_top_level_column(spec, write_jsonl):
    row = {"prompt": [{"role": "user", "content": RAW[0]["question"]}], "reward_model": {"ground_truth": "7"}}
    good = write_jsonl([row, row], "good.jsonl")
    data = {"input_key": "prompt", "label_key": "reward_model.ground_truth"}
    assert check_data_files(_rl(spec, good, **data)) == []
    check_rows(_rl(spec, good, **data))  # raises on a problem
    bad = write_jsonl([row, {"prompt": row["prompt"]}], "bad.jsonl")
    (finding,) = check_data_files(_rl(spec, bad, **data))
    assert finding.problem == "row 1 (line 2) has no value for column 'reward_model' (data.label_key)"


def test_the_checks_before_start_take_preference_pairs_for_kto(spec, write_jsonl):
    base = spec(
        "dpo", train_files=[write_jsonl([{"prompt": "2+3=", "chosen": "5", "rejected": "six"}, {"prompt": "1"}])]
    )
    pref = dataclasses.replace(base.algorithm.preference, loss="kto")
    kto = dataclasses.replace(base, algorithm=dataclasses.replace(base.algorithm, preference=pref))
    assert [f.problem for f in check_data_files(kto)] == [
        "row 1 (line 2) has no value for column 'chosen' (data.chosen_key)",
        "row 1 (line 2) has no value for column 'rejected' (data.rejected_key)",
    ]
