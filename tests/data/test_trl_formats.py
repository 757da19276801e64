"""TRL's dataset formats per trainer, read from their own columns when the data keys are left at their defaults (and
said so in the data report); a key the user set is never changed."""

from __future__ import annotations

import pytest

from rlhf.data import DataError, build_kto, build_preference, build_prompts, build_sft, load_rows
from rlhf.models.tokenizer import byte_level_tokenizer

USER = {"role": "user", "content": "2+3="}
ASSISTANT = {"role": "assistant", "content": "5"}


def rows_of(write_jsonl, rows):
    return load_rows([write_jsonl(rows)])


def trained_text(tokenizer, ids, mask) -> str:
    return tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])


# --- GRPO / RLOO: prompt-only


def test_prompt_only_standard_reads_prompt_and_carries_the_other_columns(spec, tokenizer, write_jsonl):
    ds = build_prompts(spec(), tokenizer, rows_of(write_jsonl, [{"prompt": "2+3=", "solution": "5", "level": 1}]))
    s = ds[0]
    assert s["prompt"] == "<|user|>\n2+3=<|end|>\n<|assistant|>\n" and s["raw_prompt"] == "2+3="
    assert s["columns"] == {"solution": "5", "level": 1}  # as TRL passes them to reward functions
    assert s["label"] == ""  # TRL has no label: its reward functions read the columns
    assert ds.report.summary() == (
        "train prompts: 1 rows read, 1 used; TRL prompt-only, from the columns: data.input_key=prompt "
        "(set data.*_key to read others)"
    )


def test_prompt_only_conversational_keeps_the_messages_as_the_raw_prompt(spec, tokenizer, write_jsonl):
    system = {"role": "system", "content": "be brief"}
    s = build_prompts(spec(), tokenizer, rows_of(write_jsonl, [{"prompt": [system, USER], "solution": "5"}]))[0]
    assert s["prompt"] == "<|system|>\nbe brief<|end|>\n<|user|>\n2+3=<|end|>\n<|assistant|>\n"
    assert s["raw_prompt"] == [system, USER]


def test_without_the_chat_template_a_string_prompt_is_used_as_it_is_and_a_message_list_still_rendered(
    spec, tokenizer, write_jsonl
):
    """TRL's rule (what rlhf.run and import-trl's recipes set: data.apply_chat_template=false): the data's format
    decides, row by row."""
    rows = rows_of(write_jsonl, [{"prompt": "2+3=", "solution": "5"}, {"prompt": [USER], "solution": "5"}])
    ds = build_prompts(spec(apply_chat_template=False), tokenizer, rows)
    assert ds[0]["prompt"] == "2+3=" and ds[0]["raw_prompt"] == "2+3="
    assert ds[1]["prompt"] == "<|user|>\n2+3=<|end|>\n<|assistant|>\n" and ds[1]["raw_prompt"] == [USER]


def test_a_message_list_prompt_without_any_chat_template_is_refused_naming_the_setting(spec, write_jsonl):
    tokenizer = byte_level_tokenizer()  # its own: the session's is shared
    tokenizer.chat_template = None
    rows = rows_of(write_jsonl, [{"prompt": [USER], "solution": "5"}])
    with pytest.raises(DataError, match=r"row 0 .*'prompt'.*no chat template.*model.chat_template"):
        build_prompts(spec(apply_chat_template=False), tokenizer, rows)


def test_a_key_the_user_set_is_never_replaced(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "ignored", "question": "2+3=", "solution": "5"}]
    ds = build_prompts(spec(input_key="question", label_key="solution"), tokenizer, rows_of(write_jsonl, rows))
    assert ds[0]["raw_prompt"] == "2+3=" and ds[0]["label"] == "5"
    assert ds[0]["columns"] == {"prompt": "ignored", "solution": "5"}
    assert ds.report.keys is None


def test_an_input_column_keeps_openrlhf_reading(spec, tokenizer, write_jsonl):
    ds = build_prompts(spec(), tokenizer, rows_of(write_jsonl, [{"input": "2+3=", "prompt": "other"}]))
    assert ds[0]["raw_prompt"] == "2+3=" and ds.report.keys is None


# --- SFT


def test_prompt_completion_standard_and_conversational_train_on_the_completion(spec, tokenizer, write_jsonl):
    standard = build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, [{"prompt": "2+3=", "completion": "5"}]))
    chat = build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, [{"prompt": [USER], "completion": [ASSISTANT]}]))
    for ds in (standard, chat):
        assert trained_text(tokenizer, ds[0]["input_ids"], ds[0]["loss_mask"]) == "5<|end|>"
        assert "TRL prompt-completion, from the columns: data.input_key=prompt, data.output_key=completion" in (
            ds.report.keys
        )
    assert standard[0]["input_ids"] == chat[0]["input_ids"]


def test_messages_train_on_every_assistant_turn(spec, tokenizer, write_jsonl):
    conv = [USER, ASSISTANT, {"role": "user", "content": "and 1+1="}, {"role": "assistant", "content": "2"}]
    ds = build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, [{"messages": conv}]))
    assert trained_text(tokenizer, ds[0]["input_ids"], ds[0]["loss_mask"]) == "5<|end|>\n2<|end|>"
    assert ds.report.keys.startswith(
        "TRL conversational, from the columns: data.input_key=messages, data.multiturn=true"
    )


def test_sharegpt_conversations_read_as_the_same_messages(spec, tokenizer, write_jsonl):
    chatml = build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, [{"messages": [USER, ASSISTANT]}]))
    share = [{"from": "human", "value": "2+3="}, {"from": "gpt", "value": "5"}]
    sharegpt = build_sft(
        spec("sft"),
        tokenizer,
        rows_of(
            write_jsonl,
            [{"conversations": share}],
        ),
    )
    assert sharegpt[0]["input_ids"] == chatml[0]["input_ids"]
    assert sharegpt[0]["loss_mask"] == chatml[0]["loss_mask"]
    assert sharegpt.report.keys.startswith("ShareGPT conversational, from the columns: data.input_key=conversations")


def test_a_sharegpt_message_without_value_is_named(spec, tokenizer, write_jsonl):
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt"}]}]
    with pytest.raises(DataError, match=r"row 0 \(line 1\): key 'conversations': message 1 is .*'role': 'assistant'"):
        build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, rows))


def test_text_is_language_modeling_on_every_token(spec, tokenizer, write_jsonl):
    ds = build_sft(spec("sft"), tokenizer, rows_of(write_jsonl, [{"text": "plain text"}]))
    s = ds[0]
    assert tokenizer.decode(s["input_ids"]) == "plain text<|end|>"
    assert s["loss_mask"] == [0] + [1] * (len(s["input_ids"]) - 1)
    assert "data.input_key=text, data.pretrain_mode=true" in ds.report.keys


# --- DPO / reward: preference


def test_preference_with_explicit_prompt(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "2+3=", "chosen": "5", "rejected": "six"}]
    ds = build_preference(spec("dpo"), tokenizer, rows_of(write_jsonl, rows))
    s = ds[0]
    assert tokenizer.decode(s["chosen_ids"][: s["prompt_len"]]) == "<|user|>\n2+3=<|end|>\n<|assistant|>\n"
    assert trained_text(tokenizer, s["rejected_ids"], s["rejected_mask"]) == "six<|end|>"
    assert "TRL preference (explicit prompt), from the columns: data.prompt_key=prompt" in ds.report.keys


def test_preference_with_implicit_conversational_prompt(spec, tokenizer, write_jsonl):
    rows = [{"chosen": [USER, ASSISTANT], "rejected": [USER, {"role": "assistant", "content": "six"}]}]
    ds = build_preference(spec("dpo"), tokenizer, rows_of(write_jsonl, rows))
    s = ds[0]
    assert tokenizer.decode(s["chosen_ids"][: s["prompt_len"]]) == "<|user|>\n2+3=<|end|>\n<|assistant|>\n"
    assert trained_text(tokenizer, s["chosen_ids"], s["chosen_mask"]) == "5<|end|>"
    assert ds.report.keys is None  # chosen/rejected are the defaults already


# --- KTO: unpaired preference


def test_unpaired_preference_reads_prompt_completion_and_the_bool_label(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "2+3=", "completion": "5", "label": True}, {"prompt": "2+3=", "completion": "6", "label": False}]
    ds = build_kto(spec("dpo"), tokenizer, rows_of(write_jsonl, rows))
    assert [ds[i]["desirable"] for i in range(2)] == [True, False]
    assert tokenizer.decode(ds[1]["response_ids"]) == "6<|end|>"
    assert ds.report.keys == (
        "TRL unpaired preference, from the columns: data.input_key=prompt, data.output_key=completion, "
        "data.label_key=label (set data.*_key to read others)"
    )


def test_an_unpaired_label_that_is_not_a_bool_is_named(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "2+3=", "completion": "5", "label": "maybe"}]
    with pytest.raises(DataError, match=r"row 0 \(line 1\): key 'label': is str 'maybe'; expected a boolean"):
        build_kto(spec("dpo"), tokenizer, rows_of(write_jsonl, rows))


@pytest.mark.parametrize("explicit", [True, False])
def test_preference_pairs_given_to_kto_are_unpaired_as_trl_does(spec, tokenizer, write_jsonl, explicit):
    if explicit:
        rows = [{"prompt": "2+3=", "chosen": "5", "rejected": "six"}]
    else:
        rows = [{"chosen": [USER, ASSISTANT], "rejected": [USER, {"role": "assistant", "content": "six"}]}]
    ds = build_kto(spec("dpo"), tokenizer, rows_of(write_jsonl, rows))
    assert [ds[i]["desirable"] for i in range(2)] == [True, False]
    assert [tokenizer.decode(ds[i]["response_ids"]) for i in range(2)] == ["5<|end|>", "six<|end|>"]
    assert (
        tokenizer.decode(ds[0]["prompt_ids"])
        == "<|user|>\n2+3=<|end|>\n<|assistant|>\n"
        == tokenizer.decode(ds[1]["prompt_ids"])
    )
    assert ds.report.summary() == (
        "train kto: 2 rows read, 2 used; TRL unpaired preference, from the columns: data.input_key=prompt, "
        "data.output_key=completion, data.label_key=label (set data.*_key to read others); 1 preference pairs "
        "unpaired (TRL's KTO): a desirable and an undesirable row each"
    )


def test_pairs_without_a_prompt_are_refused_for_kto(spec, tokenizer, write_jsonl):
    path = write_jsonl([{"chosen": "The sky is blue.", "rejected": "The sky is green."}])
    with pytest.raises(DataError) as e:
        build_kto(spec("dpo"), tokenizer, load_rows([path]))
    assert str(e.value) == (
        f"{path}, row 0 (line 1): key 'prompt': missing: KTO needs each pair's prompt (a prompt column, or "
        "conversations sharing all but the last message); add a prompt column"
    )
