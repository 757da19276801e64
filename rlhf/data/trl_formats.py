"""TRL's dataset formats, where they need more than choosing columns (rlhf.spec.data_formats chooses the columns).

ShareGPT messages (``{"from": "human", "value": ...}``, TRL's ``conversations``) are read as chat messages: TRL's
``maybe_convert_to_chatml`` renames ``from``/``value`` to ``role``/``content``; the roles ``human`` and ``gpt``
become ``user`` and ``assistant`` here as well, since chat templates (and data.multiturn's loss on assistant turns)
know only those.

Preference pairs given to KTO are unpaired as TRL's ``unpair_preference_dataset`` does: each row's chosen response
becomes a desirable sample, its rejected one an undesirable sample, with the same prompt (the ``prompt`` column, or
in conversations the messages before the last, which chosen and rejected must share).
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from rlhf.data.errors import ROW_COLUMN, SOURCE_COLUMN, BadRow, bad_row_error
from rlhf.data.nested import MISSING, lookup

SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}


def to_chatml(message: Any) -> Any:
    """A ShareGPT message as ``{"role", "content"}``; anything else unchanged (it is checked by the caller)."""
    if not isinstance(message, dict) or "role" in message or "from" not in message:
        return message
    role = message.get("from")
    out = {k: v for k, v in message.items() if k not in ("from", "value")}
    out["role"] = SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role
    out["content"] = message.get("value")
    return out


def _split(row: dict[str, Any], prompt_key: str | None, chosen: Any, rejected: Any) -> tuple[Any, Any, Any]:
    if prompt_key is not None:
        return lookup(row, prompt_key), chosen, rejected
    if isinstance(chosen, list) and isinstance(rejected, list) and len(chosen) > 1 and chosen[:-1] == rejected[:-1]:
        return chosen[:-1], chosen[-1:], rejected[-1:]
    raise BadRow(
        "prompt",
        "missing: KTO needs each pair's prompt (a prompt column, or conversations sharing all but the last message)",
        "add a prompt column",
        skippable=False,
    )


def unpair(rows: Dataset, prompt_key: str | None, chosen_key: str, rejected_key: str) -> Dataset:
    """Each pair as two rows ``{prompt, completion, label}`` (desirable first), keeping the pair's file and row."""
    out: dict[str, list[Any]] = {"prompt": [], "completion": [], "label": [], SOURCE_COLUMN: [], ROW_COLUMN: []}
    for row in rows:
        chosen, rejected = lookup(row, chosen_key), lookup(row, rejected_key)
        try:
            prompt, good, bad = _split(row, prompt_key, chosen, rejected)
        except BadRow as e:
            raise bad_row_error(row[SOURCE_COLUMN], row[ROW_COLUMN], e) from None
        for completion, label in ((good, True), (bad, False)):
            out["prompt"].append(None if prompt is MISSING else prompt)
            out["completion"].append(None if completion is MISSING else completion)
            out["label"].append(label)
            out[SOURCE_COLUMN].append(row[SOURCE_COLUMN])
            out[ROW_COLUMN].append(row[ROW_COLUMN])
    return Dataset.from_list([dict(zip(out, values, strict=True)) for values in zip(*out.values(), strict=True)])
