"""From an ExperimentSpec and a tokenizer to the train (and eval) datasets the pipeline needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from datasets import Dataset

from rlhf.data.loading import load_rows, split_eval
from rlhf.data.preference import build_kto, build_preference
from rlhf.data.prompts import build_prompts
from rlhf.data.report import DataReport
from rlhf.data.sft import build_sft
from rlhf.data.tokenized import TokenizedDataset
from rlhf.spec.data_formats import data_kind
from rlhf.spec.schema import ExperimentSpec

Builder = Callable[[ExperimentSpec, Any, Dataset, str], TokenizedDataset]
BUILDERS: dict[str, Builder] = {
    "prompt": build_prompts,
    "sft": build_sft,
    "preference": build_preference,
    "kto": build_kto,
}


@dataclass
class DataSplits:
    train: TokenizedDataset
    eval: TokenizedDataset | None = None

    @property
    def reports(self) -> list[DataReport]:
        return [d.report for d in (self.train, self.eval) if d is not None]

    def summary(self) -> str:
        return "\n".join(r.summary() for r in self.reports)


def load_split_rows(spec: ExperimentSpec) -> tuple[Dataset, Dataset | None]:
    """Raw train rows and eval rows (data.eval_files, else a seeded data.eval_fraction of train, else none)."""
    d = spec.data
    train = load_rows(d.train_files, d.train_split, d.train_probs, spec.seed, d.max_samples, d.on_bad_row)
    if d.eval_files:
        return train, load_rows(d.eval_files, d.eval_split, None, spec.seed, None, d.on_bad_row)
    if d.eval_fraction > 0:
        return split_eval(train, d.eval_fraction, spec.seed)
    return train, None


def build_datasets(spec: ExperimentSpec, tokenizer: Any, kind: str | None = None) -> DataSplits:
    """Load, split and tokenise the data the spec names; ``kind`` overrides :func:`data_kind`.

    Each dataset carries a :class:`DataReport`; ``DataSplits.summary()`` is what the pipeline prints.
    """
    kind = kind or data_kind(spec)
    build = BUILDERS[kind]
    train_rows, eval_rows = load_split_rows(spec)
    train = build(spec, tokenizer, train_rows, f"train {kind}")
    evaluation = build(spec, tokenizer, eval_rows, f"eval {kind}") if eval_rows is not None else None
    return DataSplits(train, evaluation)
