"""Dotted keys into nested fields, as veRL's parquet rows keep them: ``reward_model.ground_truth`` reads
``row["reward_model"]["ground_truth"]``, ``prompt.0.content`` the first message's content.

A column whose name itself holds a dot (a CSV header ``a.b``) is read as that column first, so flat files keep
working. A struct found where one value is expected is named with the dotted keys it holds, so the user can point
the setting at the one they meant instead of training on the whole struct.
"""

from __future__ import annotations

from typing import Any

from rlhf.data.errors import BadRow

MISSING = object()  # a key that is not in the row (a present null is None)


def lookup(row: dict[str, Any], key: str) -> Any:
    """``row[key]`` where ``key`` is a column or a dotted path through dicts (and list indices); :data:`MISSING`
    when a part of the path is absent, None when a part is null."""
    if key in row:
        return row[key]
    value: Any = row
    for part in key.split("."):
        if value is None:
            return None
        if isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit():
            if int(part) >= len(value):
                return MISSING
            value = value[int(part)]
        else:
            return MISSING
    return value


def dotted_keys(value: Any, prefix: str) -> list[str]:
    """The dotted keys of every leaf inside a struct, e.g. ``reward_model.ground_truth``, ``reward_model.style``."""
    if not isinstance(value, dict) or not value:
        return [prefix]
    out: list[str] = []
    for k, v in value.items():
        out += dotted_keys(v, f"{prefix}.{k}")
    return out


def deepest_present(row: dict[str, Any], key: str) -> tuple[str, Any]:
    """The longest prefix of a dotted ``key`` that the row holds, and its value: what a 'missing' message shows."""
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:n])
        value = lookup(row, prefix)
        if value is not MISSING and value is not None:
            return prefix, value
    return "", None


# The leaf a fix names first as its example: an input is likely a question, anything else an answer.
LIKELY_INPUT = ("question", "prompt", "problem", "content")
LIKELY_OTHER = ("ground_truth", "answer", "solution", "label")


def struct_refusal(key: str, value: dict[str, Any], setting: str, expected: str) -> BadRow:
    """A struct where ``expected`` (e.g. "a string") is read: not skippable, since every row is the same mistake."""
    leaves = dotted_keys(value, key)
    likely = LIKELY_INPUT if setting.endswith(("input_key", "prompt_key")) else LIKELY_OTHER
    rank = {name: i for i, name in enumerate(likely)}
    example = min(leaves, key=lambda k: rank.get(k.rsplit(".", 1)[-1], len(rank)))
    fix = f"point {setting} at one of them, e.g. {setting}={example}" if setting else f"use one of {leaves}"
    return BadRow(key, f"is a nested struct holding {', '.join(leaves)}, not {expected}", fix, skippable=False)
