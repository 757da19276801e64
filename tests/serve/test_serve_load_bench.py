"""bench/serve_load.py, briefly: both servers start on 127.0.0.1, take concurrent load (small requests alone, then
among huge ones, then beside one large request to the reward server), and the table comes out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = pytest.mark.slow  # two server start-ups: about 30 s on a quiet 2-core machine, 80 s on a busy one

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"


def test_serve_load_drives_both_servers_without_errors(tmp_path):
    out = tmp_path / "figures.json"
    args = ["--clients", "4", "--duration", "1", "--huge-queries", "64", "--over-limit-queries", "5000"]
    args += ["--large-mb", "2", "--large-queries", "2", "--json", str(out)]
    r = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=ceiling(400))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rlhf-serve-rm" in r.stdout and "openai server (hf engine)" in r.stdout and "requests/s" in r.stdout
    assert "small p95, unloaded (ms)" in r.stdout and "small p95, mixed (ms)" in r.stdout
    figures = json.loads(out.read_text())
    for server in ("rm", "openai"):
        assert figures[server]["errors"] == 0 and figures[server]["requests"] > 0
        assert 0 < figures[server]["p50_ms"] <= figures[server]["p95_ms"] <= figures[server]["p99_ms"]
        assert figures[server]["mixed_requests"] > 0 and figures[server]["huge_requests"] > 0
        assert figures[server]["mixed_errors"] == 0 and figures[server]["mixed_p95_ms"] > 0
    assert "5000 queries" in figures["rm"]["over_limit"] and "HTTP 413" in figures["rm"]["over_limit"]
    # one large request among the small clients: answered, and the small ones' figures beside the unloaded ones
    assert "one 2.0 MB request (2 queries) among them" in r.stdout and "while the large one ran" in r.stdout
    rm = figures["rm"]
    assert rm["large_status"] == 200 and rm["large_queries"] == 2 and 1.9 < rm["large_mb"] < 2.1
    assert rm["large_ms"] > 0 and rm["small_large_phase_errors"] == 0 and rm["small_large_phase_p95_ms"] > 0
    assert rm["small_unloaded_p50_ms"] <= rm["small_unloaded_p95_ms"]
