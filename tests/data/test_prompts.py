"""RL prompt data: templating, left truncation or counted drops, labels, and bad rows named by file/row/key."""

from __future__ import annotations

import pytest

from rlhf.data import DataError, build_prompts, load_rows, max_prompt_len


def build(spec, tokenizer, path, **data):
    return build_prompts(spec(**data), tokenizer, load_rows([path]))


def test_chat_template_with_generation_prompt_and_labels(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"input": "2+3=", "answer": 5, "datasource": "add"}, {"input": "hi", "answer": "x"}])
    ds = build(spec, tokenizer, path, label_key="answer")
    first = ds[0]
    assert first["prompt"] == "<|user|>\n2+3=<|end|>\n<|assistant|>\n"
    assert first["prompt_ids"] == tokenizer.encode(first["prompt"], add_special_tokens=False)
    assert (first["label"], first["datasource"]) == ("5", "add")  # labels reach reward functions as strings
    assert (ds[1]["label"], ds[1]["datasource"]) == ("x", "default")
    assert ds.report.rows_read == ds.report.rows_out == 2


def test_chat_message_lists_are_templated_as_given(spec, tokenizer, write_jsonl):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    ds = build(spec, tokenizer, write_jsonl([{"input": msgs}]))
    assert ds[0]["prompt"] == "<|system|>\nbe brief<|end|>\n<|user|>\nhi<|end|>\n<|assistant|>\n"


def test_input_template_without_chat_template(spec, tokenizer, write_jsonl):
    ds = build(spec, tokenizer, write_jsonl([{"input": "2+3"}]), apply_chat_template=False, input_template="Q: {} A:")
    assert ds[0]["prompt"] == "Q: 2+3 A:"


def test_long_prompts_are_cut_from_the_left_and_counted(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"input": "x" * 50 + "END"}, {"input": "short"}])
    ds = build(spec, tokenizer, path, apply_chat_template=False, max_len=28)  # 28 - 8 new tokens = 20
    assert max_prompt_len(spec(max_len=28)) == 20
    assert len(ds[0]["prompt_ids"]) == 20 and ds[0]["prompt"].endswith("END")
    assert (ds.report.truncated, ds.report.rows_out) == (1, 2)


def test_long_prompts_are_dropped_and_counted_when_asked(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"input": "x" * 50}, {"input": "short"}])
    ds = build(spec, tokenizer, path, apply_chat_template=False, max_prompt_len=20, on_too_long="drop")
    assert len(ds) == 1 and ds.report.dropped_too_long == 1
    assert "1 dropped (too long)" in ds.report.summary()


def test_missing_key_names_file_row_key_and_fix(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"input": "ok"}, {"question": "where is input?"}])
    with pytest.raises(DataError) as e:
        build(spec, tokenizer, path)
    msg = str(e.value)
    assert "data.jsonl, row 1 (line 2)" in msg and "'input'" in msg and "question" in msg
    assert "data.input_key" in msg and "on_bad_row=skip" in msg


def test_wrong_type_is_named(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match=r"row 0 .*'input': is int 7; expected a string"):
        build(spec, tokenizer, write_jsonl([{"input": 7}]))


def test_empty_prompt_is_a_bad_row(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match=r"row 0 .*'input': is empty"):
        build(spec, tokenizer, write_jsonl([{"input": ""}]), apply_chat_template=False)


def test_missing_label_is_a_bad_row_when_a_label_key_is_set(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match=r"row 0 .*'label'"):
        build(spec, tokenizer, write_jsonl([{"input": "a"}]), label_key="label")


def test_bad_rows_are_skipped_and_counted_when_asked(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"input": "a"}, {"input": 3}, {"nothing": 1}, {"input": "b"}])
    ds = build(spec, tokenizer, path, on_bad_row="skip")
    assert len(ds) == 2 and ds.report.skipped_bad == 2 and ds.report.rows_read == 4
    assert ds.report.as_metrics()["data/train_prompts/skipped_bad"] == 2.0


def test_nothing_usable_is_an_error_not_an_empty_dataset(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match="no usable rows"):
        build(spec, tokenizer, write_jsonl([{"x": 1}]), on_bad_row="skip")


def test_chat_template_required_when_asked_for(spec, write_jsonl):
    from rlhf.models.tokenizer import byte_level_tokenizer

    bare = byte_level_tokenizer()
    bare.chat_template = None
    with pytest.raises(DataError, match="no chat template.*apply_chat_template=false"):
        build(spec, bare, write_jsonl([{"input": "a"}]))
