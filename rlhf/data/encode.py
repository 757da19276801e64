"""The loop every builder shares: encode each row, name bad rows or count them, apply length limits, report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset, Json

from rlhf.data.errors import MALFORMED_COLUMN, ROW_COLUMN, SOURCE_COLUMN, BadRow, DataError, bad_row_error
from rlhf.data.report import DataReport
from rlhf.spec.names import BAD_ROW_POLICIES

OK, TRUNCATED, DROPPED = "ok", "truncated", "dropped"


@dataclass
class Encoded:
    """One encoded sample (``fields``: column -> value) and what the length limit did to it."""

    fields: dict[str, Any] = field(default_factory=dict)
    status: str = OK  # ok | truncated | dropped


Encoder = Callable[[dict[str, Any]], Encoded]


def encode_rows(
    rows: Dataset, encode: Encoder, report: DataReport, on_bad_row: str = "error", json_columns: Sequence[str] = ()
) -> Dataset:
    """Run ``encode`` over every row and collect the kept samples into a new Dataset, counting into ``report``.

    ``json_columns`` are given by ``encode`` as JSON strings and read back as Python values (``datasets.Json``):
    values whose shape differs from row to row, which an Arrow struct column could not hold as they are.

    A :class:`BadRow` becomes a :class:`DataError` naming file, row and key (``on_bad_row=error``) or a counted
    skip (``skip``). Raises a DataError when no row survives, so an empty dataset never reaches training.
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise DataError(f"data.on_bad_row={on_bad_row!r}: use one of {', '.join(BAD_ROW_POLICIES)}")
    columns: dict[str, list[Any]] = {}
    for batch in rows.iter(batch_size=512):
        n = len(batch[SOURCE_COLUMN])
        for i in range(n):
            row = {k: v[i] for k, v in batch.items()}
            report.rows_read += 1
            if row.get(MALFORMED_COLUMN):  # a line of the file that did not parse (see rlhf.data.loading)
                if on_bad_row == "skip":
                    report.skipped_bad += 1
                    continue
                raise DataError(f"{row[SOURCE_COLUMN]}: {row[MALFORMED_COLUMN]}; fix the line") from None
            try:
                out = encode(row)
            except BadRow as bad:
                if on_bad_row == "skip" and bad.skippable:
                    report.skipped_bad += 1
                    continue
                raise bad_row_error(row[SOURCE_COLUMN], row[ROW_COLUMN], bad) from None
            if out.status == DROPPED:
                report.dropped_too_long += 1
                continue
            if out.status == TRUNCATED:
                report.truncated += 1
            for k, v in out.fields.items():
                columns.setdefault(k, []).append(v)
            report.rows_out += 1
    if report.rows_out == 0:
        raise DataError(f"{report.summary()}: no usable rows left; check the data keys and data.max_len")
    data = Dataset.from_dict(columns)
    for name in json_columns:
        data = data.cast_column(name, Json())
    return data


def fit_sequence(
    ids: list[int], mask: list[int], prompt_len: int, max_len: int, policy: str, eos_id: int
) -> tuple[list[int], list[int], str]:
    """Apply ``data.max_len`` to a training sequence (OpenRLHF SFT/reward datasets).

    A prompt that leaves fewer than 2 tokens of room is dropped whatever the policy; a longer sequence is cut to
    ``max_len`` with its last token forced to eos (``truncate``) or dropped (``drop``).
    """
    if prompt_len >= max_len - 2:
        return ids, mask, DROPPED
    if len(ids) <= max_len:
        return ids, mask, OK
    if policy == "drop":
        return ids, mask, DROPPED
    ids, mask = ids[:max_len], mask[:max_len]
    ids[-1] = eos_id
    mask[-1] = 1
    return ids, mask, TRUNCATED
