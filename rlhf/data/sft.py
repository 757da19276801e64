"""SFT data (OpenRLHF ``SFTDataset``): token ids and a loss mask per sample.

Columns: ``input_ids`` and ``loss_mask`` (token-aligned, 1 where the token is a training target), plus
``position_ids`` and ``segment_ids`` when ``data.packing`` packs samples (see :mod:`rlhf.data.packing`).

Modes:
    single-turn   data.input_key (prompt: string or messages) + data.output_key (response); loss on the response,
                  eos appended. With a chat template and no output_key, the input is a conversation whose last
                  message is the response.
    multi-turn    data.multiturn: data.input_key holds a whole conversation; loss on every assistant turn.
    pretrain      data.pretrain_mode: loss on every token of data.input_key (+ data.output_key when set).
Keys may be dotted (``extra_info.question``); left at their defaults they are read from TRL's formats (prompt-
completion, ``messages``, ShareGPT ``conversations``, ``text``) or veRL's SFT layout (rlhf.spec.data_formats).
Length: data.max_len; a prompt leaving fewer than 2 tokens is dropped, longer samples truncated (last token eos)
or dropped per data.on_too_long.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from rlhf.data import fields
from rlhf.data.detect import resolve_for_rows
from rlhf.data.encode import Encoded, encode_rows, fit_sequence
from rlhf.data.errors import BadRow, DataError
from rlhf.data.formatting import Formatter, Segment, to_messages
from rlhf.data.packing import pack_samples
from rlhf.data.prompts import formatter
from rlhf.data.report import DataReport
from rlhf.data.tokenized import TokenizedDataset
from rlhf.spec.schema import DataSpec, ExperimentSpec


def _check_mode(d: DataSpec) -> None:
    if d.multiturn and not d.apply_chat_template:
        raise DataError("data.multiturn=true needs data.apply_chat_template=true (turns are found by the template)")
    if not (d.pretrain_mode or d.multiturn or d.output_key or d.apply_chat_template):
        raise DataError(
            "SFT needs data.output_key (the response column), or chat conversations with "
            "data.apply_chat_template=true, or data.pretrain_mode=true"
        )


def sft_segments(d: DataSpec, fmt: Formatter, row: dict[str, Any]) -> list[Segment]:
    """The row as (text, trainable) segments for the configured mode."""
    key = d.input_key
    if d.pretrain_mode:
        text = fields.text(row, key, "data.input_key")
        if d.output_key:
            text += fields.text(row, d.output_key, "data.output_key")
        return [(text, True)]
    if d.multiturn:
        msgs = fields.messages(row, key, "data.input_key")
        if d.output_key:
            msgs += to_messages(fields.text_or_messages(row, d.output_key, "data.output_key"), "assistant")
        trainable = [m["role"] == "assistant" for m in msgs]
        if not any(trainable):
            raise BadRow(key, "has no assistant message to train on")
        return fmt.conversation_segments(msgs, trainable, key)
    if d.output_key:
        prompt = fields.text_or_messages(row, key, "data.input_key")
        response = fields.text_or_messages(row, d.output_key, "data.output_key")
        return fmt.pair_segments(prompt, response, d.output_key)
    msgs = fields.messages(row, key, "data.input_key")
    if len(msgs) < 2:
        raise BadRow(key, "needs a prompt and a response message", "or set data.output_key to the response column")
    return fmt.pair_segments(msgs[:-1], msgs[-1:], key)


def build_sft(spec: ExperimentSpec, tokenizer: Any, rows: Dataset, name: str = "train sft") -> TokenizedDataset:
    spec, keys = resolve_for_rows(spec, "sft", rows)
    d = spec.data
    _check_mode(d)
    fmt = formatter(spec, tokenizer, apply_chat_template=d.apply_chat_template and not d.pretrain_mode)

    def encode(row: dict[str, Any]) -> Encoded:
        ids, mask, prompt_len = fmt.tokenize_segments(sft_segments(d, fmt, row))
        ids, mask, status = fit_sequence(ids, mask, prompt_len, d.max_len, d.on_too_long, fmt.eos_id)
        return Encoded({"input_ids": ids, "loss_mask": mask}, status)

    report = DataReport(name, keys=keys)
    data = encode_rows(rows, encode, report, d.on_bad_row)
    if d.packing:
        data = pack_samples(data, d.max_len)
        report.packed_rows = len(data)
    return TokenizedDataset(data, report, "sft")
