"""Reading one value out of a row, checked: a missing key or a wrong type raises :class:`BadRow` naming the key.

Keys may be dotted paths into nested fields (rlhf.data.nested: ``reward_model.ground_truth``); a struct where one
value is expected is refused with the dotted keys it holds. A chat conversation is a list of
``{"role": str, "content": str}`` messages (OpenAI / HF chat format; ShareGPT's ``from``/``value`` are read as such).
"""

from __future__ import annotations

import json
from typing import Any

from rlhf.data.errors import BadRow
from rlhf.data.nested import MISSING, deepest_present, dotted_keys, lookup, struct_refusal
from rlhf.data.trl_formats import to_chatml

Messages = list[dict[str, str]]
TextOrMessages = str | Messages


def _setting_fix(setting: str) -> str:
    return f"add it to every row, or point {setting} at the right column" if setting else "add it to every row"


def require(row: dict[str, Any], key: str, setting: str = "") -> Any:
    """``row[key]`` (or the dotted path ``key``), which must be present and not null."""
    value = lookup(row, key)
    if value is MISSING or value is None:
        prefix, holder = deepest_present(row, key) if "." in key else ("", None)
        if prefix:
            raise BadRow(key, f"missing ({prefix} holds {dotted_keys(holder, prefix)})", _setting_fix(setting))
        # Nested fields by their dotted keys, so the fix for a veRL row (reward_model.ground_truth) is in sight.
        available = sorted(
            f for k, v in row.items() if not k.startswith("_") and v is not None for f in dotted_keys(v, k)
        )
        raise BadRow(key, f"missing (row has {available})", _setting_fix(setting))
    return value


def _wrong_type(key: str, value: Any, setting: str, expected: str) -> BadRow:
    if isinstance(value, dict):
        return struct_refusal(key, value, setting, expected)
    return BadRow(key, f"is {type(value).__name__} {value!r}; expected {expected}")


def _check_messages(value: list, key: str) -> Messages:
    if not value:
        raise BadRow(key, "is an empty list; expected a string or a list of chat messages")
    value = [to_chatml(m) for m in value]
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise BadRow(key, f"message {i} is {m!r}; expected {{'role': str, 'content': str}}")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def text_or_messages(row: dict[str, Any], key: str, setting: str = "") -> TextOrMessages:
    """A string, or a non-empty list of chat messages."""
    value = require(row, key, setting)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _check_messages(value, key)
    raise _wrong_type(key, value, setting, "a string or a list of chat messages")


def text(row: dict[str, Any], key: str, setting: str = "") -> str:
    value = require(row, key, setting)
    if not isinstance(value, str):
        raise _wrong_type(key, value, setting, "a string")
    return value


def messages(row: dict[str, Any], key: str, setting: str = "") -> Messages:
    value = require(row, key, setting)
    if isinstance(value, dict):
        raise struct_refusal(key, value, setting, "a list of chat messages")
    if not isinstance(value, list):
        raise BadRow(key, f"is {type(value).__name__}; expected a list of chat messages (a conversation)")
    return _check_messages(value, key)


def number(row: dict[str, Any], key: str, setting: str = "") -> float:
    """A number (an int, a float, or a string holding one)."""
    value = require(row, key, setting)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _wrong_type(key, value, setting, "a number")


def flag(row: dict[str, Any], key: str, setting: str = "") -> bool:
    """A boolean: true/false, 1/0, or the strings "true"/"false"."""
    value = require(row, key, setting)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _wrong_type(key, value, setting, "a boolean (true/false)")


def label(row: dict[str, Any], key: str, setting: str = "data.label_key") -> str:
    """The label reward functions receive: a string, a number or a list (as :func:`label_text` writes it); a struct
    is refused (``data.label_key=reward_model`` would otherwise score every sample against the whole struct)."""
    value = require(row, key, setting)
    if isinstance(value, dict):
        raise struct_refusal(key, value, setting, "a string")
    return label_text(value)


def label_text(value: Any) -> str:
    """A label as the string reward functions receive (OpenRLHF passes labels through as strings):
    null -> "", strings unchanged, anything else JSON-encoded (numbers as written: 7 -> "7")."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
