"""Preference data for reward models and DPO (OpenRLHF ``RewardDataset``), and unpaired KTO data.

Pairs — columns: ``chosen_ids``, ``rejected_ids`` (prompt + response + eos), ``chosen_mask``, ``rejected_mask``
(token-aligned, 1 on response tokens), ``prompt_len`` (shared prompt tokens), ``margin`` (float, 0.0 without
data.margin_key).
    With data.prompt_key: prompt, chosen and rejected are separate columns (strings or messages).
    Without it, with a chat template, chosen/rejected are whole conversations: the prompt is chosen[:-1] and
    the responses are the last messages (both conversations must agree before that).
    Without either, chosen/rejected are complete texts and the prompt is empty.

Left at their defaults, keys are read from TRL's formats (explicit ``prompt``; KTO's ``prompt``/``completion``/
``label``), see rlhf.spec.data_formats; keys may be dotted into nested fields.

KTO — columns: ``prompt_ids``, ``response_ids``, ``desirable`` (bool from data.label_key): kept apart so the
collate function can pair prompt i with response i+1 for KTO's KL estimate.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from rlhf.data import fields
from rlhf.data.detect import resolve_for_rows, shape_of
from rlhf.data.encode import DROPPED, OK, TRUNCATED, Encoded, encode_rows, fit_sequence
from rlhf.data.errors import BadRow, DataError
from rlhf.data.fields import TextOrMessages
from rlhf.data.prompts import formatter
from rlhf.data.report import DataReport
from rlhf.data.tokenized import TokenizedDataset
from rlhf.data.trl_formats import unpair
from rlhf.spec.data_formats import needs_unpairing
from rlhf.spec.schema import DataSpec, ExperimentSpec


def _split_prompt(d: DataSpec, row: dict[str, Any]) -> tuple[TextOrMessages | None, TextOrMessages, TextOrMessages]:
    chosen = fields.text_or_messages(row, d.chosen_key, "data.chosen_key")
    rejected = fields.text_or_messages(row, d.rejected_key, "data.rejected_key")
    if d.prompt_key:
        return fields.text_or_messages(row, d.prompt_key, "data.prompt_key"), chosen, rejected
    if d.apply_chat_template and isinstance(chosen, list):
        if not isinstance(rejected, list):
            raise BadRow(d.rejected_key, "is a string but chosen is a conversation; give both in the same form")
        if len(chosen) < 2:
            raise BadRow(d.chosen_key, "needs prompt messages and a response", "or set data.prompt_key")
        if rejected[:-1] != chosen[:-1]:
            raise BadRow(d.rejected_key, "differs from chosen before the last message (the shared prompt)")
        return chosen[:-1], chosen[-1:], rejected[-1:]
    return None, chosen, rejected


def _worst(*statuses: str) -> str:
    return DROPPED if DROPPED in statuses else TRUNCATED if TRUNCATED in statuses else OK


def build_preference(
    spec: ExperimentSpec, tokenizer: Any, rows: Dataset, name: str = "train preference"
) -> TokenizedDataset:
    spec, keys = resolve_for_rows(spec, "preference", rows)
    d = spec.data
    fmt = formatter(spec, tokenizer)

    def encode(row: dict[str, Any]) -> Encoded:
        prompt, chosen, rejected = _split_prompt(d, row)
        c_ids, c_mask, plen = fmt.tokenize_segments(fmt.pair_segments(prompt, chosen, d.chosen_key))
        r_ids, r_mask, _ = fmt.tokenize_segments(fmt.pair_segments(prompt, rejected, d.rejected_key))
        c_ids, c_mask, c_status = fit_sequence(c_ids, c_mask, plen, d.max_len, d.on_too_long, fmt.eos_id)
        r_ids, r_mask, r_status = fit_sequence(r_ids, r_mask, plen, d.max_len, d.on_too_long, fmt.eos_id)
        margin = fields.number(row, d.margin_key, "data.margin_key") if d.margin_key else 0.0
        out = {
            "chosen_ids": c_ids,
            "chosen_mask": c_mask,
            "rejected_ids": r_ids,
            "rejected_mask": r_mask,
            "prompt_len": plen,
            "margin": margin,
        }
        return Encoded(out, _worst(c_status, r_status))

    report = DataReport(name, keys=keys)
    return TokenizedDataset(encode_rows(rows, encode, report, d.on_bad_row), report, "preference")


def build_kto(spec: ExperimentSpec, tokenizer: Any, rows: Dataset, name: str = "train kto") -> TokenizedDataset:
    pairs = 0
    if needs_unpairing(spec.data, "kto", shape_of(rows)):
        d, pairs = spec.data, len(rows)
        prompt_key = d.prompt_key or ("prompt" if "prompt" in rows.column_names else None)
        rows = unpair(rows, prompt_key, d.chosen_key, d.rejected_key)
    spec, keys = resolve_for_rows(spec, "kto", rows)
    d = spec.data
    if not d.output_key or not d.label_key:
        raise DataError("KTO data needs data.output_key (the response) and data.label_key (desirable: true/false)")
    fmt = formatter(spec, tokenizer)

    def encode(row: dict[str, Any]) -> Encoded:
        prompt = fields.text_or_messages(row, d.input_key, "data.input_key")
        response = fields.text_or_messages(row, d.output_key, "data.output_key")
        desirable = fields.flag(row, d.label_key, "data.label_key")
        ids, mask, plen = fmt.tokenize_segments(fmt.pair_segments(prompt, response, d.output_key))
        ids, mask, status = fit_sequence(ids, mask, plen, d.max_len, d.on_too_long, fmt.eos_id)
        return Encoded({"prompt_ids": ids[:plen], "response_ids": ids[plen:], "desirable": desirable}, status)

    report = DataReport(name, keys=keys)
    if pairs:
        report.notes.append(f"{pairs} preference pairs unpaired (TRL's KTO): a desirable and an undesirable row each")
    return TokenizedDataset(encode_rows(rows, encode, report, d.on_bad_row), report, "kto")
