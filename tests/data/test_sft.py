"""SFT data: which tokens carry loss in each mode, eos, length limits, packing boundaries."""

from __future__ import annotations

import pytest
import torch

from rlhf.data import DataError, block_causal_mask, build_sft, load_rows


def build(spec, tokenizer, rows, write_jsonl, **data):
    return build_sft(spec(family="sft", **data), tokenizer, load_rows([write_jsonl(rows)]))


def trained_text(tokenizer, sample) -> str:
    return tokenizer.decode([t for t, m in zip(sample["input_ids"], sample["loss_mask"], strict=True) if m])


def test_single_turn_trains_on_the_response_and_eos_only(spec, tokenizer, write_jsonl):
    ds = build(spec, tokenizer, [{"input": "2+3=", "output": "5"}], write_jsonl, output_key="output")
    s = ds[0]
    assert tokenizer.decode(s["input_ids"]) == "<|user|>\n2+3=<|end|>\n<|assistant|>\n5<|end|>"
    assert trained_text(tokenizer, s) == "5<|end|>"
    assert s["input_ids"][-1] == tokenizer.eos_token_id


def test_without_chat_template_the_input_template_joins_prompt_and_response(spec, tokenizer, write_jsonl):
    rows = [{"input": "2+3", "output": " 5"}]
    ds = build(
        spec, tokenizer, rows, write_jsonl, output_key="output", apply_chat_template=False, input_template="Q: {} A:"
    )
    assert tokenizer.decode(ds[0]["input_ids"]) == "Q: 2+3 A: 5<|end|>"
    assert trained_text(tokenizer, ds[0]) == " 5<|end|>"


def test_conversation_without_output_key_trains_on_the_last_message(spec, tokenizer, write_jsonl):
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ds = build(spec, tokenizer, [{"input": conv}], write_jsonl)
    assert trained_text(tokenizer, ds[0]) == "hello<|end|>"


def test_multiturn_trains_on_every_assistant_turn(spec, tokenizer, write_jsonl):
    conv = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "two"},
    ]
    ds = build(spec, tokenizer, [{"input": conv}], write_jsonl, multiturn=True)
    s = ds[0]
    assert tokenizer.decode(s["input_ids"]) == tokenizer.apply_chat_template(conv, tokenize=False).rstrip("\n")
    assert trained_text(tokenizer, s) == "one<|end|>\ntwo<|end|>"


def test_pretrain_mode_trains_on_every_token_but_the_first(spec, tokenizer, write_jsonl):
    ds = build(spec, tokenizer, [{"input": "plain text"}], write_jsonl, pretrain_mode=True)
    s = ds[0]
    assert tokenizer.decode(s["input_ids"]) == "plain text<|end|>"
    assert s["loss_mask"] == [0] + [1] * (len(s["input_ids"]) - 1)


def test_long_samples_truncate_to_max_len_ending_in_eos_or_drop(spec, tokenizer, write_jsonl):
    rows = [{"input": "q", "output": "y" * 100}, {"input": "q", "output": "y"}]
    kw = {"output_key": "output", "apply_chat_template": False, "max_len": 32}
    ds = build(spec, tokenizer, rows, write_jsonl, **kw)
    assert len(ds[0]["input_ids"]) == 32 and ds[0]["input_ids"][-1] == tokenizer.eos_token_id
    assert ds[0]["loss_mask"][-1] == 1 and ds.report.truncated == 1
    dropped = build(spec, tokenizer, rows, write_jsonl, on_too_long="drop", **kw)
    assert len(dropped) == 1 and dropped.report.dropped_too_long == 1


def test_a_prompt_that_leaves_no_room_is_dropped(spec, tokenizer, write_jsonl):
    rows = [{"input": "p" * 40, "output": "y"}, {"input": "q", "output": "y"}]
    ds = build(spec, tokenizer, rows, write_jsonl, output_key="output", apply_chat_template=False, max_len=32)
    assert len(ds) == 1 and ds.report.dropped_too_long == 1


def test_sft_without_a_response_column_is_a_config_error(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match="data.output_key"):
        build(spec, tokenizer, [{"input": "a"}], write_jsonl, apply_chat_template=False)


def test_multiturn_row_that_is_not_a_conversation_is_named(spec, tokenizer, write_jsonl):
    with pytest.raises(DataError, match=r"row 0 .*'input'.*list of chat messages"):
        build(spec, tokenizer, [{"input": "just text"}], write_jsonl, multiturn=True)


def test_packing_keeps_samples_whole_and_apart(spec, tokenizer, write_jsonl):
    rows = [{"input": "q" * k, "output": "a"} for k in (3, 4, 5, 20)]
    kw = {"output_key": "output", "apply_chat_template": False, "max_len": 24}
    plain = build(spec, tokenizer, rows, write_jsonl, **kw)
    packed = build(spec, tokenizer, rows, write_jsonl, packing=True, **kw)
    assert packed.report.packed_rows == len(packed) == 2 and packed.report.rows_out == 4
    first = packed[0]
    lens = [len(plain[i]["input_ids"]) for i in range(3)]
    assert first["input_ids"] == sum((plain[i]["input_ids"] for i in range(3)), [])
    assert first["position_ids"] == sum((list(range(n)) for n in lens), [])
    assert first["segment_ids"] == sum(([i + 1] * n for i, n in enumerate(lens)), [])
    starts = [0, lens[0], lens[0] + lens[1]]
    assert all(first["loss_mask"][s] == 0 for s in starts)  # no sample is predicted from the one before


def test_block_causal_mask_blocks_attention_across_samples():
    seg = torch.tensor([[1, 1, 2, 2, 0]])
    m = block_causal_mask(seg)[0, 0]
    assert m.shape == (5, 5)
    assert m[1, 0] and not m[0, 1]  # causal inside sample 1
    assert not m[2, 1] and m[3, 2]  # sample 2 cannot see sample 1
    assert m[4].tolist() == [False, False, False, False, True]  # padding sees only itself
