"""The data.*_key settings for these rows: rlhf.spec.data_formats reads the peers' layouts from the columns; this
module gives it the columns of a loaded Dataset (struct fields from its features, else from the first row)."""

from __future__ import annotations

import dataclasses

from datasets import Dataset

from rlhf.spec.data_formats import Resolved, resolve_keys, shape_of_row
from rlhf.spec.schema import ExperimentSpec


def shape_of(rows: Dataset) -> dict[str, list[str] | None]:
    shape: dict[str, list[str] | None] = {}
    first = rows[0] if len(rows) else {}
    for name, feature in rows.features.items():
        if isinstance(feature, dict):
            shape[name] = list(feature)
        else:  # a JSON column (files mixed with other types) or a plain value: the first row says
            shape[name] = shape_of_row({name: first.get(name)})[name]
    return shape


def resolve_for_rows(spec: ExperimentSpec, kind: str, rows: Dataset) -> tuple[ExperimentSpec, str | None]:
    """``spec`` with the data keys these rows' layout names (only those left at their defaults), and the one line
    that says what was read from the columns (None when nothing was)."""
    resolved: Resolved = resolve_keys(spec.data, kind, shape_of(rows))
    if not resolved.filled:
        return spec, None
    return dataclasses.replace(spec, data=resolved.data), resolved.line
