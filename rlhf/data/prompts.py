"""RL prompt data (OpenRLHF ``PromptDataset``): one prompt per row, tokenised for the rollout engine.

Columns: ``prompt_ids`` (list[int], no special tokens added beyond the template's), ``prompt`` (the text the
policy continues from, as given to reward functions), ``label`` (str, "" without data.label_key), ``datasource``
(str, "default" where the row has none; eval metrics are grouped by it).

Prompts longer than the maximum prompt length (``data.max_prompt_len``, else ``data.max_len -
rollout.max_new_tokens``) are cut from the left, keeping the end that the answer follows (``on_too_long=truncate``),
or dropped (``drop``); both are counted.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from rlhf.data import fields
from rlhf.data.encode import DROPPED, OK, TRUNCATED, Encoded, encode_rows
from rlhf.data.errors import BadRow
from rlhf.data.formatting import Formatter
from rlhf.data.report import DataReport
from rlhf.data.tokenized import TokenizedDataset
from rlhf.spec.derive import derive
from rlhf.spec.schema import ExperimentSpec


def max_prompt_len(spec: ExperimentSpec) -> int:
    return derive(spec).max_prompt_len


def formatter(spec: ExperimentSpec, tokenizer: Any, apply_chat_template: bool | None = None) -> Formatter:
    d = spec.data
    chat = d.apply_chat_template if apply_chat_template is None else apply_chat_template
    return Formatter(tokenizer, chat, d.input_template, spec.model.chat_template)


def build_prompts(spec: ExperimentSpec, tokenizer: Any, rows: Dataset, name: str = "train prompts") -> TokenizedDataset:
    d = spec.data
    fmt = formatter(spec, tokenizer)
    limit = max_prompt_len(spec)

    def encode(row: dict[str, Any]) -> Encoded:
        text = fmt.prompt(fields.text_or_messages(row, d.input_key, "data.input_key"), d.input_key)
        ids = fmt.encode(text)
        if not ids:
            raise BadRow(d.input_key, "is empty; a prompt needs at least one token")
        status = OK
        if len(ids) > limit:
            if d.on_too_long == "drop":
                return Encoded(status=DROPPED)
            ids, status = ids[-limit:], TRUNCATED
            text = tokenizer.decode(ids, skip_special_tokens=False)
        label = fields.label_text(fields.require(row, d.label_key, "data.label_key")) if d.label_key else ""
        source = row.get(d.datasource_key)
        datasource = "default" if source is None or source == "" else str(source)
        return Encoded({"prompt_ids": ids, "prompt": text, "label": label, "datasource": datasource}, status)

    report = DataReport(name)
    return TokenizedDataset(encode_rows(rows, encode, report, d.on_bad_row), report, "prompt")
