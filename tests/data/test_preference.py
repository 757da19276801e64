"""Preference (RM/DPO) and KTO data: prompt handling per OpenRLHF, shared prompt tokens, margins, masks."""

from __future__ import annotations

import pytest

from rlhf.data import DataError, build_kto, build_preference, load_rows


def build(spec, tokenizer, rows, write_jsonl, **data):
    return build_preference(spec(family="dpo", **data), tokenizer, load_rows([write_jsonl(rows)]))


def decode_masked(tokenizer, ids, mask):
    return tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])


def test_prompt_key_pairs_share_the_prompt_and_mask_only_responses(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "2+3=", "chosen": "5", "rejected": "six", "m": 1.5}]
    ds = build(spec, tokenizer, rows, write_jsonl, prompt_key="prompt", margin_key="m")
    s = ds[0]
    plen = s["prompt_len"]
    assert s["chosen_ids"][:plen] == s["rejected_ids"][:plen]
    assert tokenizer.decode(s["chosen_ids"][:plen]) == "<|user|>\n2+3=<|end|>\n<|assistant|>\n"
    assert decode_masked(tokenizer, s["chosen_ids"], s["chosen_mask"]) == "5<|end|>"
    assert decode_masked(tokenizer, s["rejected_ids"], s["rejected_mask"]) == "six<|end|>"
    assert s["margin"] == 1.5


def test_conversations_without_prompt_key_take_the_prompt_from_chosen(spec, tokenizer, write_jsonl):
    user = {"role": "user", "content": "hi"}
    rows = [
        {
            "chosen": [user, {"role": "assistant", "content": "hello"}],
            "rejected": [user, {"role": "assistant", "content": "go away"}],
        }
    ]
    s = build(spec, tokenizer, rows, write_jsonl)[0]
    assert tokenizer.decode(s["chosen_ids"][: s["prompt_len"]]) == "<|user|>\nhi<|end|>\n<|assistant|>\n"
    assert decode_masked(tokenizer, s["rejected_ids"], s["rejected_mask"]) == "go away<|end|>"
    assert s["margin"] == 0.0


def test_conversations_disagreeing_before_the_answer_are_named(spec, tokenizer, write_jsonl):
    rows = [
        {
            "chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}],
            "rejected": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "y"}],
        }
    ]
    with pytest.raises(DataError, match=r"row 0 .*'rejected'.*differs from chosen"):
        build(spec, tokenizer, rows, write_jsonl)


def test_plain_texts_without_prompt_have_empty_prompt(spec, tokenizer, write_jsonl):
    rows = [{"chosen": "good", "rejected": "bad"}]
    s = build(spec, tokenizer, rows, write_jsonl, apply_chat_template=False)[0]
    assert s["prompt_len"] == 0 and tokenizer.decode(s["chosen_ids"]) == "good<|end|>"


def test_bad_margin_and_missing_rejected_are_named_or_skipped(spec, tokenizer, write_jsonl):
    rows = [
        {"prompt": "p", "chosen": "a", "rejected": "b", "m": "wide"},
        {"prompt": "p", "chosen": "a"},
        {"prompt": "p", "chosen": "a", "rejected": "b", "m": 2},
    ]
    with pytest.raises(DataError, match=r"row 0 .*'m': is str 'wide'; expected a number"):
        build(spec, tokenizer, rows, write_jsonl, prompt_key="prompt", margin_key="m")
    ds = build(spec, tokenizer, rows, write_jsonl, prompt_key="prompt", margin_key="m", on_bad_row="skip")
    assert len(ds) == 1 and ds.report.skipped_bad == 2


def test_too_long_pairs_are_counted_once(spec, tokenizer, write_jsonl):
    rows = [{"prompt": "p", "chosen": "c" * 60, "rejected": "r" * 60}]
    ds = build(spec, tokenizer, rows, write_jsonl, prompt_key="prompt", apply_chat_template=False, max_len=16)
    s = ds[0]
    assert len(s["chosen_ids"]) == len(s["rejected_ids"]) == 16 and ds.report.truncated == 1
    assert s["chosen_ids"][-1] == s["rejected_ids"][-1] == tokenizer.eos_token_id


def test_kto_keeps_prompt_and_response_apart_with_the_desirable_flag(spec, tokenizer, write_jsonl):
    rows = [{"input": "2+3=", "output": "5", "ok": True}, {"input": "2+3=", "output": "7", "ok": "false"}]
    sp = spec(family="dpo", output_key="output", label_key="ok")
    ds = build_kto(sp, tokenizer, load_rows([write_jsonl(rows)]))
    assert tokenizer.decode(ds[0]["response_ids"]) == "5<|end|>"
    assert [ds[0]["desirable"], ds[1]["desirable"]] == [True, False]
    with pytest.raises(DataError, match="data.label_key"):
        build_kto(spec(family="dpo", output_key="output"), tokenizer, load_rows([write_jsonl(rows)]))
