"""Every column a prompt row does not consume travels with it as a plain ``columns`` dict of JSON values, for reward
functions that take dataset columns (TRL's); what JSON cannot hold is left out and named once."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pyarrow.parquet as pq

from rlhf.data import build_prompts, collate_prompts, load_rows


def test_columns_are_plain_json_values_per_row_whatever_each_row_holds(spec, tokenizer, write_jsonl):
    rows = [
        {"input": "a", "answer": "1", "tags": ["x", "y"], "meta": {"k": 1}},
        {"input": "b", "answer": "2", "tags": [], "meta": {"k": None}},
    ]
    ds = build_prompts(spec(label_key="answer"), tokenizer, load_rows([write_jsonl(rows)]))
    got = ds.rows([0, 1])
    assert [r["columns"] for r in got] == [
        {"answer": "1", "tags": ["x", "y"], "meta": {"k": 1}},
        {"answer": "2", "tags": [], "meta": {"k": None}},
    ]
    assert all(type(r["columns"]) is dict for r in got)
    json.dumps([r["columns"] for r in got])  # JSON-able as they are: raises otherwise
    assert "_source" not in got[0]["columns"] and "input" not in got[0]["columns"]


def test_dates_become_iso_text_and_bytes_are_left_out_and_named(spec, tokenizer, tmp_path):
    path = tmp_path / "rows.parquet"
    table = pa.table(
        {
            "input": ["2+3="],
            "when": pa.array([datetime.datetime(2024, 5, 1, 12, 30)], pa.timestamp("s")),
            "blob": pa.array([b"\x00\x01"], pa.binary()),
        }
    )
    pq.write_table(table, path)
    ds = build_prompts(spec(), tokenizer, load_rows([str(path)]))
    assert ds[0]["columns"] == {"when": "2024-05-01T12:30:00"}
    assert ds.report.summary() == (
        "train prompts: 1 rows read, 1 used; not passed to reward functions (not JSON): blob"
    )


def test_the_prompt_batch_carries_the_columns(spec, tokenizer, write_jsonl):
    ds = build_prompts(spec(), tokenizer, load_rows([write_jsonl([{"input": "a", "x": 1}, {"input": "b", "x": 2}])]))
    batch = collate_prompts(ds.rows([0, 1]), pad_id=0)
    assert batch["columns"] == [{"x": 1}, {"x": 2}]
