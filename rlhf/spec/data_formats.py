"""Which columns a dataset's rows are read from, when the data.*_key settings are left at their defaults: the
peers' layouts (TRL's dataset formats, veRL's parquet) are recognised from the column names, so their files are
read as they are. Torch-free: the preflight and the row check use it before anything starts, the row builders
(rlhf.data) when they read the rows.

Only a key left at its default whose column the rows lack (``data.input_key=input``), or an unset key
(``data.output_key``, ``data.label_key``, ``data.prompt_key``), is filled in; a key the user set is never changed.
What was filled in is said in one line (:attr:`Resolved.line`), printed with the data report.

    data kind   columns found                       read as
    prompt      prompt, reward_model.ground_truth   veRL: input_key=prompt, label_key=reward_model.ground_truth
    prompt      prompt                              TRL prompt-only: input_key=prompt
    sft         prompt, completion                  TRL prompt-completion: input_key=prompt, output_key=completion
    sft         messages | conversations            TRL conversational (ShareGPT): input_key=..., multiturn=true
    sft         text                                TRL language modeling: input_key=text, pretrain_mode=true
    sft         extra_info.question/.answer         veRL SFT: input_key=extra_info.question, output_key=...answer
    preference  prompt (+ chosen, rejected)         TRL explicit prompt: prompt_key=prompt
    kto         prompt, completion, label           TRL unpaired preference
    kto         [prompt,] chosen, rejected          TRL preference, unpaired: each pair a desirable and an
                                                    undesirable sample, then read as above
    prompt      data_source (no datasource)         veRL: datasource_key=data_source
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlhf.spec.schema import DataSpec, ExperimentSpec

# column -> the keys of its struct (None: not a struct; UNKNOWN: not looked at, may be a struct with those fields)
Shape = Mapping[str, Sequence[str] | None]
UNKNOWN: Sequence[str] = ("?",)  # the checks before start-up know a file's column names, not their fields

DEFAULTS = DataSpec()


def data_kind(spec: ExperimentSpec) -> str:
    """Which dataset the algorithm trains on: prompt (RL), sft, preference (RM, DPO family) or kto."""
    family = spec.algorithm.family
    if family == "rl":
        return "prompt"
    if family == "sft":
        return "sft"
    if family == "dpo" and spec.algorithm.preference.loss == "kto":
        return "kto"
    return "preference"


@dataclass(frozen=True)
class Resolved:
    data: DataSpec
    format: str = ""  # e.g. "veRL parquet layout"; "" when nothing was filled in
    filled: dict[str, Any] = field(default_factory=dict)  # data.* key -> the value read from the columns

    @property
    def line(self) -> str | None:
        """``veRL parquet layout, from the columns: data.input_key=prompt, ...``, or None."""
        if not self.filled:
            return None
        keys = ", ".join(f"data.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.filled.items())
        return f"{self.format}, from the columns: {keys} (set data.*_key to read others)"


def shape_of_row(row: Mapping[str, Any]) -> dict[str, list[str] | None]:
    """The shape of one row (the first of a JSON Lines file, say)."""
    return {k: list(v) if isinstance(v, dict) else None for k, v in row.items()}


def _struct_has(shape: Shape, column: str, *fields: str) -> bool:
    keys = shape.get(column)
    return keys is UNKNOWN or (keys is not None and all(f in keys for f in fields))


def _left_default(d: DataSpec, name: str, shape: Shape) -> bool:
    """``data.<name>`` is at its default and names no column of these rows (a None key counts as left)."""
    value = getattr(d, name)
    if value is None:
        return True
    return value == getattr(DEFAULTS, name) and value.split(".")[0] not in shape


def _fill(d: DataSpec, kind: str, shape: Shape) -> tuple[str, dict[str, Any]]:
    has = shape.__contains__
    if kind == "prompt" and _left_default(d, "input_key", shape) and has("prompt"):
        if _struct_has(shape, "reward_model", "ground_truth"):
            filled: dict[str, Any] = {"input_key": "prompt"}
            if d.label_key is None:
                filled["label_key"] = "reward_model.ground_truth"
            return "veRL parquet layout", filled
        return "TRL prompt-only", {"input_key": "prompt"}
    if kind == "sft" and _left_default(d, "input_key", shape) and d.output_key is None:
        if has("prompt") and has("completion"):
            return "TRL prompt-completion", {"input_key": "prompt", "output_key": "completion"}
        for column, name in (("messages", "TRL conversational"), ("conversations", "ShareGPT conversational")):
            if has(column):
                return name, {"input_key": column, "multiturn": True}
        if has("text"):
            return "TRL language modeling", {"input_key": "text", "pretrain_mode": True}
        if _struct_has(shape, "extra_info", "question", "answer"):
            return "veRL SFT layout", {"input_key": "extra_info.question", "output_key": "extra_info.answer"}
    if kind == "preference" and d.prompt_key is None and has("prompt"):
        return "TRL preference (explicit prompt)", {"prompt_key": "prompt"}
    if kind == "kto":
        filled = {}
        if _left_default(d, "input_key", shape) and has("prompt"):
            filled["input_key"] = "prompt"
        if d.output_key is None and has("completion"):
            filled["output_key"] = "completion"
        if d.label_key is None and has("label"):
            filled["label_key"] = "label"
        return "TRL unpaired preference", filled
    return "", {}


def needs_unpairing(d: DataSpec, kind: str, shape: Shape) -> bool:
    """KTO given preference pairs (TRL's KTOTrainer takes them too): each pair becomes a desirable and an
    undesirable sample (rlhf.data.trl_formats.unpair) before the keys are read."""
    return (
        kind == "kto"
        and d.output_key is None
        and "completion" not in shape
        and d.chosen_key in shape
        and d.rejected_key in shape
    )


def resolve_keys(d: DataSpec, kind: str, shape: Shape) -> Resolved:
    """``d`` with the keys left at their defaults read from the rows' columns (see the module docstring)."""
    fmt, filled = _fill(d, kind, shape)
    if kind == "prompt" and _left_default(d, "datasource_key", shape) and "data_source" in shape:
        filled["datasource_key"] = "data_source"
        fmt = fmt or "veRL parquet layout"
    if not filled:
        return Resolved(d)
    return Resolved(dataclasses.replace(d, **filled), fmt, filled)
