"""docs/scripts/default_figures.py draws the site's figures of the embedded default from a run's metrics.jsonl:
each task's eval curve and the start-up phases come from the logged rows, nothing typed by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "default_figures.py"
spec = importlib.util.spec_from_file_location("default_figures", SCRIPT)
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)

ROWS = [
    {"step": 0, "eval_add_pass1": 0.0, "eval_copy_pass1": 0.1, "startup/launch_s": 4.8, "startup/engines_s": 2.4},
    {"step": 1, "train/loss": 1.0},
    {"step": 100, "eval/eval_add_pass1": 0.78, "eval/eval_copy_pass1": 0.99, "eval/eval_pass1_mean": 0.9},
    {"step": 160, "eval_add_pass1": 0.92, "eval_copy_pass1": 0.993},
]


def test_the_eval_series_and_startup_phases_come_from_the_logged_rows():
    assert figures.eval_series(ROWS) == {
        "add": [(0, 0.0), (100, 0.78), (160, 0.92)],
        "copy": [(0, 0.1), (100, 0.99), (160, 0.993)],
    }
    assert figures.startup_phases(ROWS) == [("launch", 4.8), ("engines", 2.4)]


def test_the_chart_has_one_line_per_task_and_marks_the_handover(tmp_path):
    drawn = figures.svg(figures.eval_series(ROWS), handover=100)
    assert drawn.count("<polyline") == 2 and "SFT -&gt; GRPO" in drawn and drawn.startswith("<svg")


def test_the_script_writes_the_chart_and_the_dated_page_from_a_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    figures.main([str(run), "--out", str(tmp_path / "figures")])
    text = (tmp_path / "figures" / "quickstart.md").read_text()
    assert "| 160 | 0.920 | 0.993 |" in text and "Start-up: launch 4.8 s, engines 2.4 s." in text
    assert (tmp_path / "figures" / "quickstart_eval.svg").read_text().count("<polyline") == 2
