"""veRL's parquet layout read as it is: dotted keys into nested fields, the message-list prompt, ``data_source`` as
the datasource, the rest carried to reward functions; a struct where a string is read is refused by key and row."""

from __future__ import annotations

import pytest
from verl_gsm8k_layout import DATA_SOURCE, INSTRUCTION, RAW, write_gsm8k_parquet

from rlhf.data import DataError, build_prompts, build_sft, load_rows


@pytest.fixture
def gsm8k(tmp_path):
    return str(write_gsm8k_parquet(tmp_path / "train.parquet"))


def test_verl_keys_read_the_message_prompt_the_nested_answer_and_data_source(spec, tokenizer, gsm8k):
    ds = build_prompts(spec(input_key="prompt", label_key="reward_model.ground_truth"), tokenizer, load_rows([gsm8k]))
    first = ds[0]
    question = RAW[0]["question"] + " " + INSTRUCTION
    assert first["prompt"] == f"<|user|>\n{question}<|end|>\n<|assistant|>\n"
    assert first["raw_prompt"] == [{"role": "user", "content": question}]
    assert [ds[i]["label"] for i in range(4)] == ["7", "24", "1000", "9"]  # veRL's extraction, commas removed
    assert first["datasource"] == DATA_SOURCE  # data.datasource_key left at its default: data_source is read
    assert first["columns"] == {
        "data_source": DATA_SOURCE,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "7"},
        "extra_info": {"split": "train", "index": 0, "answer": RAW[0]["answer"], "question": RAW[0]["question"]},
    }
    assert ds.report.keys == (
        "veRL parquet layout, from the columns: data.datasource_key=data_source (set data.*_key to read others)"
    )


def test_verl_layout_is_recognised_from_the_columns_and_said_in_one_line(spec, tokenizer, gsm8k):
    ds = build_prompts(spec(), tokenizer, load_rows([gsm8k]))
    assert (ds[1]["label"], ds[1]["datasource"]) == ("24", DATA_SOURCE)
    assert ds.report.summary() == (
        "train prompts: 4 rows read, 4 used; veRL parquet layout, from the columns: data.input_key=prompt, "
        "data.label_key=reward_model.ground_truth, data.datasource_key=data_source (set data.*_key to read others)"
    )


@pytest.mark.parametrize("on_bad_row", ["error", "skip"])
def test_a_struct_given_as_the_label_is_refused_naming_key_row_and_its_dotted_keys(spec, tokenizer, gsm8k, on_bad_row):
    with pytest.raises(DataError) as e:
        build_prompts(
            spec(input_key="prompt", label_key="reward_model", on_bad_row=on_bad_row), tokenizer, load_rows([gsm8k])
        )
    assert str(e.value) == (
        f"{gsm8k}, row 0: key 'reward_model': is a nested struct holding reward_model.style, "
        "reward_model.ground_truth, not a string; point data.label_key at one of them, e.g. "
        "data.label_key=reward_model.ground_truth"
    )  # never skipped: the setting is wrong for every row


def test_a_struct_given_as_the_prompt_is_refused_with_its_dotted_keys(spec, tokenizer, gsm8k):
    with pytest.raises(DataError) as e:
        build_prompts(spec(input_key="extra_info"), tokenizer, load_rows([gsm8k]))
    assert str(e.value) == (
        f"{gsm8k}, row 0: key 'extra_info': is a nested struct holding extra_info.split, extra_info.index, "
        "extra_info.answer, extra_info.question, not a string or a list of chat messages; point data.input_key at "
        "one of them, e.g. data.input_key=extra_info.question"
    )


def test_a_missing_nested_field_names_what_the_struct_holds(spec, tokenizer, gsm8k):
    with pytest.raises(DataError) as e:
        build_prompts(spec(input_key="prompt", label_key="reward_model.answer"), tokenizer, load_rows([gsm8k]))
    msg = str(e.value)
    assert msg.startswith(f"{gsm8k}, row 0: key 'reward_model.answer': missing (reward_model holds ")
    assert "['reward_model.style', 'reward_model.ground_truth']" in msg and "point data.label_key at" in msg


def test_a_missing_column_lists_the_rows_nested_fields_by_their_dotted_keys(spec, tokenizer, gsm8k):
    with pytest.raises(DataError) as e:
        build_prompts(spec(input_key="prompt", label_key="label"), tokenizer, load_rows([gsm8k]))
    assert "key 'label': missing (row has ['ability', 'data_source', 'extra_info.answer', 'extra_info.index', " in str(
        e.value
    )
    assert "'prompt', 'reward_model.ground_truth', 'reward_model.style']); " in str(e.value)


def test_dotted_keys_index_lists_and_name_the_datasource(spec, tokenizer, gsm8k):
    data = dict(input_key="prompt.0.content", label_key="extra_info.index", datasource_key="extra_info.split")
    ds = build_prompts(spec(apply_chat_template=False, **data), tokenizer, load_rows([gsm8k]))
    assert ds[2]["prompt"] == RAW[2]["question"] + " " + INSTRUCTION
    assert (ds[2]["label"], ds[2]["datasource"]) == ("2", "train")


def test_sft_reads_the_verl_sft_fields_given_or_recognised(spec, tokenizer, gsm8k):
    given = build_sft(
        spec("sft", input_key="extra_info.question", output_key="extra_info.answer"), tokenizer, load_rows([gsm8k])
    )
    found = build_sft(spec("sft"), tokenizer, load_rows([gsm8k]))
    assert given[0]["input_ids"] == found[0]["input_ids"]
    target = [t for t, m in zip(given[0]["input_ids"], given[0]["loss_mask"], strict=True) if m]
    assert tokenizer.decode(target).startswith(RAW[0]["answer"])  # the loss is on the answer alone
    assert given.report.keys is None
    assert found.report.keys == (
        "veRL SFT layout, from the columns: data.input_key=extra_info.question, data.output_key=extra_info.answer "
        "(set data.*_key to read others)"
    )
