"""RL prompt data (OpenRLHF ``PromptDataset``): one prompt per row, tokenised for the rollout engine.

Columns: ``prompt_ids`` (list[int], no special tokens added beyond the template's), ``prompt`` (the text the
policy continues from, as given to reward functions), ``label`` (str, "" without data.label_key), ``datasource``
(str, "default" where the row has none; eval metrics are grouped by it), ``raw_prompt`` (data.input_key's value
before the chat template: a string or a list of messages, what TRL passes reward functions as ``prompts``),
``columns`` (a plain dict: every other column of the row, for reward functions that take dataset columns as TRL's
do; rlhf.data.columns).

Keys may be dotted (``data.label_key=reward_model.ground_truth``); left at their defaults, they are read from the
columns when the rows are in TRL's prompt-only format or veRL's parquet layout (rlhf.spec.data_formats), said in
the data report.

Prompts longer than the maximum prompt length (``data.max_prompt_len``, else ``data.max_len -
rollout.max_new_tokens``) are cut from the left, keeping the end that the answer follows (``on_too_long=truncate``),
or dropped (``drop``); both are counted.
"""

from __future__ import annotations

import json
from typing import Any

from datasets import Dataset

from rlhf.data import fields
from rlhf.data.columns import carried
from rlhf.data.detect import resolve_for_rows
from rlhf.data.encode import DROPPED, OK, TRUNCATED, Encoded, encode_rows
from rlhf.data.errors import BadRow
from rlhf.data.formatting import Formatter
from rlhf.data.nested import MISSING, lookup
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
    spec, keys = resolve_for_rows(spec, "prompt", rows)
    d = spec.data
    left_out: set[str] = set()
    fmt = formatter(spec, tokenizer)
    limit = max_prompt_len(spec)

    def encode(row: dict[str, Any]) -> Encoded:
        raw = fields.text_or_messages(row, d.input_key, "data.input_key")
        text = fmt.prompt(raw, d.input_key)
        ids = fmt.encode(text)
        if not ids:
            raise BadRow(d.input_key, "is empty; a prompt needs at least one token")
        status = OK
        if len(ids) > limit:
            if d.on_too_long == "drop":
                return Encoded(status=DROPPED)
            ids, status = ids[-limit:], TRUNCATED
            text = tokenizer.decode(ids, skip_special_tokens=False)
        label = fields.label(row, d.label_key) if d.label_key else ""
        source = lookup(row, d.datasource_key)
        datasource = "default" if source in (None, "", MISSING) else str(source)
        out = {"prompt_ids": ids, "prompt": text, "label": label, "datasource": datasource}
        out |= {"raw_prompt": json.dumps(raw, ensure_ascii=False), "columns": carried(row, [d.input_key], left_out)}
        return Encoded(out, status)

    report = DataReport(name, keys=keys)
    data = encode_rows(rows, encode, report, d.on_bad_row, json_columns=["raw_prompt", "columns"])
    if left_out:
        report.notes.append(f"not passed to reward functions (not JSON): {', '.join(sorted(left_out))}")
    return TokenizedDataset(data, report, "prompt")
