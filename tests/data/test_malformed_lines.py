"""Malformed lines and empty files: named by file and line, or skipped and counted with data.on_bad_row=skip."""

from __future__ import annotations

import json

import pytest

from rlhf.data import DataError, build_datasets, load_rows

GOOD = [{"input": f"q{i}", "label": str(i)} for i in range(4)]


def lines_with_bad(tmp_path, name="t.jsonl"):
    """Lines 1, 3, 5, 6 are rows; line 2 is cut off, line 4 is an array; line 6 has no 'label'."""
    text = [json.dumps(GOOD[0]), '{"input": "q9", "label": ', json.dumps(GOOD[1]), "[1, 2]", json.dumps(GOOD[2])]
    text.append(json.dumps({"input": "q5"}))
    path = tmp_path / name
    path.write_text("\n".join(text) + "\n")
    return str(path)


def test_malformed_lines_are_named_by_file_and_line(tmp_path):
    path = lines_with_bad(tmp_path)
    with pytest.raises(DataError) as err:
        load_rows([path])
    message = str(err.value)
    assert message.startswith(f"{path}: line 2: not valid JSON (Expecting value, column")
    assert "line 4: an array, not a JSON object" in message and "set data.on_bad_row=skip" in message


def test_skip_skips_malformed_lines_counts_them_and_keeps_line_numbers(tmp_path, tokenizer, spec):
    path = lines_with_bad(tmp_path)
    s = spec(train_files=[path], label_key="label", on_bad_row="skip", max_len=64)
    train = build_datasets(s, tokenizer).train
    assert [r["label"] for r in train.rows(range(len(train)))] == ["0", "1", "2"]
    r = train.report
    assert (r.rows_read, r.skipped_bad, r.rows_out) == (6, 3, 3)  # 2 malformed lines + 1 row without 'label'
    assert "3 skipped (bad rows)" in r.summary()
    rows = load_rows([path], on_bad_row="skip")  # a stand-in row per malformed line: later rows keep their line
    assert rows["_row"] == [0, 1, 2, 3, 4, 5]
    assert [m for m in rows["_malformed"] if m] == [
        "line 2: not valid JSON (Expecting value, column 26)",
        "line 4: an array, not a JSON object ({...}: one row per line)",
    ]


@pytest.mark.parametrize(
    ("name", "text"), [("e.jsonl", ""), ("e.jsonl", "\n \n"), ("e.json", "[]"), ("e.csv", "a,b\n")]
)
def test_empty_file_is_reported_as_empty(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError, match=f"{name}: the file is empty"):
        load_rows([str(path)])


def test_malformed_csv_and_json_array_lines_are_named_and_cannot_be_skipped(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("input,label\nq0,0\nq1,1,extra\n")
    with pytest.raises(DataError, match="t.csv: line 3: 3 fields, the header has 2; fix the line"):
        load_rows([str(csv)], on_bad_row="skip")
    array = tmp_path / "t.json"
    array.write_text('[{"input": "q0"},\n {"input": }]\n')
    with pytest.raises(DataError, match="t.json: line 2: not valid JSON .*cannot skip inside one JSON array"):
        load_rows([str(array)], on_bad_row="skip")
