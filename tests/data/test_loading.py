"""Reading rows from every kind of source, mixing them, and naming each row's origin."""

from __future__ import annotations

import datasets
import pytest

from rlhf.data import DataError, builtin_path, load_rows, split_eval
from rlhf.spec.paths import builtin_datasets

ROWS = [{"input": f"q{i}", "label": str(i)} for i in range(6)]


def test_every_local_format_loads_with_source_and_row(tmp_path, write_jsonl):
    ds = datasets.Dataset.from_list(ROWS)
    paths = {
        "jsonl": write_jsonl(ROWS),
        "csv": str(tmp_path / "d.csv"),
        "parquet": str(tmp_path / "d.parquet"),
        "folder": str(tmp_path / "saved"),
    }
    ds.to_csv(paths["csv"])
    ds.to_parquet(paths["parquet"])
    ds.save_to_disk(paths["folder"])
    for path in paths.values():
        rows = load_rows([path])
        assert rows["input"] == [r["input"] for r in ROWS], path
        assert rows["_source"] == [path] * 6 and rows["_row"] == list(range(6))


def test_arrow_file_loads(tmp_path):
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    assert load_rows([str(arrow)])["label"] == [r["label"] for r in ROWS]


def test_builtin_names_resolve_and_unknown_lists_them():
    assert "arith" in builtin_datasets()
    assert builtin_path("arith").name == "arith.jsonl"
    assert len(load_rows(["builtin:arith"])) == 500
    with pytest.raises(DataError, match=r"builtin:nope.*available: .*arith"):
        load_rows(["builtin:nope"])


def test_missing_local_file_is_named_without_trying_the_hub(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="nope.jsonl: no such file"):
        load_rows([missing])


def test_unparsable_file_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "ok"}\n{not json\n')
    with pytest.raises(DataError, match="bad.jsonl: line 2: not valid JSON"):
        load_rows([str(bad)])


def test_concatenation_keeps_order_and_per_file_row_indices(write_jsonl):
    a = write_jsonl(ROWS[:2], "a.jsonl")
    b = write_jsonl(ROWS[2:5], "b.jsonl")
    rows = load_rows([a, b])
    assert rows["input"] == ["q0", "q1", "q2", "q3", "q4"]
    assert list(zip(rows["_source"], rows["_row"], strict=True)) == [(a, 0), (a, 1), (b, 0), (b, 1), (b, 2)]


def test_probabilities_interleave_until_every_file_is_exhausted_and_are_seeded(write_jsonl):
    a = write_jsonl([{"input": f"a{i}"} for i in range(3)], "a.jsonl")
    b = write_jsonl([{"input": f"b{i}"} for i in range(20)], "b.jsonl")
    mixed = load_rows([a, b], probs=[0.5, 0.5], seed=1)
    assert {f"b{i}" for i in range(20)} <= set(mixed["input"])  # all_exhausted: the long file is read to the end
    assert mixed["input"] == load_rows([a, b], probs=[0.5, 0.5], seed=1)["input"]
    assert mixed["input"] != load_rows([a, b], probs=[0.5, 0.5], seed=2)["input"]


def test_probability_count_must_match_files(write_jsonl):
    with pytest.raises(DataError, match="2 values for 1 train files"):
        load_rows([write_jsonl(ROWS)], probs=[0.5, 0.5])


def test_max_samples_caps_each_file_and_the_total(write_jsonl):
    a, b = write_jsonl(ROWS, "a.jsonl"), write_jsonl(ROWS, "b.jsonl")
    assert len(load_rows([a], max_samples=4)) == 4
    assert len(load_rows([a, b], max_samples=4)) == 4


def test_files_with_different_columns_and_types_still_mix(write_jsonl):
    a = write_jsonl([{"input": "text", "label": "1"}], "a.jsonl")
    b = write_jsonl([{"input": [{"role": "user", "content": "hi"}]}], "b.jsonl")
    rows = load_rows([a, b])
    assert rows["input"][0] == "text" and rows["input"][1] == [{"role": "user", "content": "hi"}]
    assert rows["label"] == ["1", None]  # later reported as a missing key, naming b.jsonl row 0


def test_eval_fraction_holds_out_a_seeded_disjoint_share(write_jsonl):
    rows = load_rows([write_jsonl([{"input": f"q{i}"} for i in range(50)])])
    train, held = split_eval(rows, 0.1, seed=3)
    assert len(held) == 5 and len(train) == 45
    assert not set(train["input"]) & set(held["input"])
    assert split_eval(rows, 0.1, seed=3)[1]["input"] == held["input"]
    with pytest.raises(DataError, match="eval_fraction"):
        split_eval(rows, 1.5, seed=3)
