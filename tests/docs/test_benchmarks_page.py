"""The site's benchmark page covers every benchmark: each script in bench/ (but its shared reward, which the page
names too) has the page name it, so a new benchmark cannot land without its table or its "no figures yet" line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_bench_script_is_on_the_benchmark_page():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) >= 8  # the scan sees the benchmarks at all
    missing = [name for name in scripts if f"`bench/{name}" not in page]
    assert not missing, f"docs/benchmarks.md does not name: {', '.join(missing)} (a table, or 'no figures yet')"
