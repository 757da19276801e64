"""The columns a prompt row carries to the reward functions, as TRL passes every dataset column it did not consume
to them (``f(prompts, completions, completion_ids, **columns)``): one plain dict per prompt record, ``columns``.

Consumed is the prompt's own column (data.input_key, as TRL leaves out ``prompt``) and the loader's bookkeeping
(``_source``, ``_row``). Labels and data sources stay in: TRL's reward functions name them (``solution``), veRL's
read ``extra_info``. Values are kept as JSON (strings, numbers, booleans, null, lists, dicts; dates as ISO text);
a column holding anything else (bytes, an image) is left out and named once in the data report.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterable
from typing import Any

from rlhf.data.errors import MALFORMED_COLUMN, ROW_COLUMN, SOURCE_COLUMN

BOOKKEEPING = frozenset({SOURCE_COLUMN, ROW_COLUMN, MALFORMED_COLUMN})


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(type(value).__name__)


def carried(row: dict[str, Any], consumed: Iterable[str], left_out: set[str]) -> str:
    """The row's other columns as one JSON object (text; the dataset reads it back as a dict). Columns that are
    not JSON are added to ``left_out`` and not carried."""
    skip = BOOKKEEPING | set(consumed)
    out = {k: v for k, v in row.items() if k not in skip}
    try:
        return json.dumps(out, default=_plain, ensure_ascii=False)
    except (TypeError, ValueError):  # find the offending columns (rare: only then is each column tried alone)
        keep = {}
        for k, v in out.items():
            try:
                json.dumps(v, default=_plain)
                keep[k] = v
            except (TypeError, ValueError):
                left_out.add(k)
        return json.dumps(keep, default=_plain, ensure_ascii=False)
