"""Reading one value out of a row, checked: a missing key or a wrong type raises :class:`BadRow` naming the key.

A chat conversation is a list of ``{"role": str, "content": str}`` messages (OpenAI / HF chat format).
"""

from __future__ import annotations

import json
from typing import Any

from rlhf.data.errors import BadRow

Messages = list[dict[str, str]]
TextOrMessages = str | Messages


def _setting_fix(setting: str) -> str:
    return f"add it to every row, or point {setting} at the right column" if setting else "add it to every row"


def require(row: dict[str, Any], key: str, setting: str = "") -> Any:
    """``row[key]``, which must be present and not null."""
    value = row.get(key)
    if value is None:
        available = sorted(k for k, v in row.items() if not k.startswith("_") and v is not None)
        raise BadRow(key, f"missing (row has {available})", _setting_fix(setting))
    return value


def _check_messages(value: list, key: str) -> Messages:
    if not value:
        raise BadRow(key, "is an empty list; expected a string or a list of chat messages")
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
    raise BadRow(key, f"is {type(value).__name__} {value!r}; expected a string or a list of chat messages")


def text(row: dict[str, Any], key: str, setting: str = "") -> str:
    value = require(row, key, setting)
    if not isinstance(value, str):
        raise BadRow(key, f"is {type(value).__name__} {value!r}; expected a string")
    return value


def messages(row: dict[str, Any], key: str, setting: str = "") -> Messages:
    value = require(row, key, setting)
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
    raise BadRow(key, f"is {type(value).__name__} {value!r}; expected a number")


def flag(row: dict[str, Any], key: str, setting: str = "") -> bool:
    """A boolean: true/false, 1/0, or the strings "true"/"false"."""
    value = require(row, key, setting)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadRow(key, f"is {type(value).__name__} {value!r}; expected a boolean (true/false)")


def label_text(value: Any) -> str:
    """A label as the string reward functions receive (OpenRLHF passes labels through as strings):
    null -> "", strings unchanged, anything else JSON-encoded (numbers as written: 7 -> "7")."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
