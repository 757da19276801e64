"""Which data sources a spec names and which columns every row of each must hold: what the preflight and the run's
own row check (rlhf.data.row_check) read before any process starts.

A dotted key (``reward_model.ground_truth``) needs its top-level column here (the row builders name a missing nested
field by row); keys left at their defaults are read from the first row's columns as the builders read them
(rlhf.spec.data_formats), so a TRL or veRL file is not refused for lacking ``input``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rlhf.spec.data_formats import UNKNOWN, data_kind, needs_unpairing, resolve_keys
from rlhf.spec.schema import ExperimentSpec


@dataclass(frozen=True)
class DataSource:
    key: str  # the setting that names it, e.g. "data.train_files[0]"
    source: str  # a path, builtin:NAME, a folder or a hub name
    columns: dict[str, str] = field(default_factory=dict)  # column -> the setting that names it


def data_sources(spec: ExperimentSpec) -> Iterator[tuple[str, str]]:
    """(key, source) of every train and eval source, e.g. ``("data.train_files[0]", "data/train.jsonl")``."""
    d = spec.data
    for i, f in enumerate(d.train_files):
        yield f"data.train_files[{i}]", f
    for i, f in enumerate(d.eval_files):
        yield f"data.eval_files[{i}]", f


def _column(key: str, columns: Sequence[str] | None) -> str:
    """The top-level column a (dotted) key reads: the key itself where the rows have a column of that name."""
    return key if columns is not None and key in columns else key.split(".")[0]


def required_columns(spec: ExperimentSpec, columns: Sequence[str] | None = None) -> dict[str, str]:
    """Column -> the key that names it, for what the algorithm's row builder requires in every row; ``columns``
    (the first row's, where known) lets keys left at their defaults be read from a peer's layout."""
    d, family = spec.data, spec.algorithm.family
    if columns is not None:
        d = resolve_keys(d, data_kind(spec), dict.fromkeys(columns, UNKNOWN)).data
    if family == "rl":
        keys = {"data.input_key": d.input_key, "data.label_key": d.label_key}
    elif family == "sft":
        keys = {"data.input_key": d.input_key, "data.output_key": d.output_key}
    elif family == "dpo" and spec.algorithm.preference.loss == "kto":
        keys = {"data.input_key": d.input_key, "data.output_key": d.output_key, "data.label_key": d.label_key}
        if columns is not None and needs_unpairing(d, "kto", dict.fromkeys(columns, UNKNOWN)):
            keys = {"data.chosen_key": d.chosen_key, "data.rejected_key": d.rejected_key}
    else:
        keys = {
            "data.chosen_key": d.chosen_key,
            "data.rejected_key": d.rejected_key,
            "data.prompt_key": d.prompt_key,
            "data.margin_key": d.margin_key,
        }
    out: dict[str, str] = {}
    for key, column in keys.items():
        if column:  # two dotted keys into one struct (extra_info.question, .answer) need one column: name both
            top = _column(column, columns)
            out[top] = f"{out[top]}, {key}" if top in out else key
    return out


def columns_for(spec: ExperimentSpec, src: DataSource, first_keys: Sequence[str] | None) -> dict[str, str]:
    """``src.columns`` as the builders will read this source, now that its first row's columns are known."""
    if first_keys is None or not src.key.startswith("data."):
        return src.columns
    return required_columns(spec, first_keys)


def sources_with_columns(spec: ExperimentSpec) -> list[DataSource]:
    """Every source the run reads rows from (data.*, and an RL run's SFT warm-up pairs), with its columns."""
    columns = required_columns(spec)
    out = [DataSource(key, source, columns) for key, source in data_sources(spec)]
    w = spec.sft_warmup
    if spec.algorithm.family == "rl" and w.steps > 0:
        pairs = {w.input_key: "sft_warmup.input_key", w.output_key: "sft_warmup.output_key"}
        out += [DataSource(f"sft_warmup.train_files[{i}]", f, pairs) for i, f in enumerate(w.train_files)]
    return out
