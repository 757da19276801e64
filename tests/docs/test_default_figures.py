"""docs/scripts/default_figures.py draws the site's figures of the embedded default from a run's metrics.jsonl:
each task's eval curve and the start-up phases come from the logged rows, nothing typed by hand. The run they were
drawn from is committed beside them (docs/figures/quickstart_run.json: its eval and start-up rows, date, machine and
commit), and the eval tables of the README and the laptop page must be that run's figures, cell for cell."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "scripts" / "default_figures.py"
FIGURES = ROOT / "docs" / "figures"
# the pages' eval table: column -> the logged metric (eval/eval_<metric>, and its _se)
COLUMNS = {"copy": "copy_pass1", "next": "next_pass1", "add": "add_pass1", "mean": "pass1_mean"}
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
    # the record keeps the eval and start-up rows only, and draws the same page again without the run
    rec = json.loads((tmp_path / "figures" / "quickstart_run.json").read_text())
    assert [r["step"] for r in rec["rows"]] == [0, 100, 160] and "train/loss" not in str(rec["rows"])
    figures.main(["--record", str(tmp_path / "figures" / "quickstart_run.json"), "--out", str(tmp_path / "again")])
    assert (tmp_path / "again" / "quickstart.md").read_text() == text


def test_the_committed_figures_are_drawn_from_the_committed_run(tmp_path):
    rec = json.loads((FIGURES / "quickstart_run.json").read_text())
    figures.write(tmp_path, rec)
    for name in ("quickstart.md", "quickstart_eval.svg"):
        assert (tmp_path / name).read_text() == (FIGURES / name).read_text(), (
            f"docs/figures/{name} is not drawn from docs/figures/quickstart_run.json; redraw with: "
            "python docs/scripts/default_figures.py --record docs/figures/quickstart_run.json"
        )


def _eval_table(text: str) -> dict[int, dict[str, str]]:
    """The first table of ``text`` headed ``| step | stage | copy | next | add | mean |``: step -> column -> cell."""
    header = "| step | stage | copy | next | add | mean |"
    lines = text[text.index(header) :].splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    table = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[int(cells[0])] = dict(zip(columns, cells, strict=True))
    return table


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started/laptop.md"])
def test_the_pages_eval_tables_are_the_committed_runs_figures(page):
    rec = json.loads((FIGURES / "quickstart_run.json").read_text())
    logged = {r["step"]: r for r in rec["rows"] if "eval/eval_pass1_mean" in r}
    text = (ROOT / page).read_text()
    table = _eval_table(text)
    assert {0, rec["handover"], max(logged)} <= set(table), f"{page}: the table lacks the start, hand-over or end"
    for step, row in table.items():
        for column, key in COLUMNS.items():
            value, se = logged[step][f"eval/eval_{key}"], logged[step][f"eval/eval_{key}_se"]
            shown = re.fullmatch(r"([0-9.]+)(?: ± ([0-9.]+))?", row[column])
            assert shown, f"{page}, step {step}, {column}: {row[column]!r}"
            assert shown[1] == f"{value:.3f}", f"{page}, step {step}, {column}: {shown[1]}, the run logged {value:.3f}"
            # a cell shows no error only where the error is 0 at three decimals
            assert (shown[2] or "0.000") == f"{se:.3f}", f"{page}, step {step}, {column}: the run's error {se:.3f}"
    assert rec["when"][:10] in text, f"{page} does not date its table as the run ({rec['when']})"
