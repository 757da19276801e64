"""From a spec to train/eval datasets: the algorithm picks the kind, eval comes from files or a held-out share."""

from __future__ import annotations

import dataclasses

from rlhf.data import build_datasets, data_kind
from rlhf.spec.schema import AlgorithmSpec, DataSpec, ExperimentSpec, PreferenceSpec


def test_the_algorithm_family_picks_the_dataset_kind():
    def kind(family, loss="dpo"):
        return data_kind(ExperimentSpec(algorithm=AlgorithmSpec(family=family, preference=PreferenceSpec(loss=loss))))

    assert [kind("rl"), kind("sft"), kind("rm"), kind("dpo"), kind("dpo", "kto")] == [
        "prompt",
        "sft",
        "preference",
        "preference",
        "kto",
    ]


def test_eval_from_files_or_from_a_seeded_held_out_fraction(tokenizer, write_jsonl):
    rows = [{"input": f"q{i}", "label": str(i)} for i in range(40)]
    base = ExperimentSpec(
        algorithm=AlgorithmSpec(family="rl"),
        data=DataSpec(train_files=[write_jsonl(rows)], label_key="label", max_len=64),
    )
    assert build_datasets(base, tokenizer).eval is None
    held = dataclasses.replace(base, data=dataclasses.replace(base.data, eval_fraction=0.25))
    splits = build_datasets(held, tokenizer)
    assert (len(splits.train), len(splits.eval)) == (30, 10)
    assert not {r["label"] for r in splits.train.rows(range(30))} & {r["label"] for r in splits.eval.rows(range(10))}
    assert "train prompt: 30 rows read" in splits.summary() and "eval prompt: 10 rows read" in splits.summary()
    files = dataclasses.replace(
        base, data=dataclasses.replace(base.data, eval_files=[write_jsonl(rows[:5], "e.jsonl")])
    )
    assert len(build_datasets(files, tokenizer).eval) == 5
