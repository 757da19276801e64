"""bench/serve_load.py, briefly: both servers start on 127.0.0.1, take concurrent load, and the table comes out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two server start-ups: about 30 s on a quiet 2-core machine, 80 s on a busy one

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"


def test_serve_load_drives_both_servers_without_errors(tmp_path):
    out = tmp_path / "figures.json"
    args = ["--clients", "4", "--duration", "2", "--json", str(out)]
    r = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rlhf-serve-rm" in r.stdout and "openai server (hf engine)" in r.stdout and "requests/s" in r.stdout
    figures = json.loads(out.read_text())
    for server in ("rm", "openai"):
        assert figures[server]["errors"] == 0 and figures[server]["requests"] > 0
        assert 0 < figures[server]["p50_ms"] <= figures[server]["p99_ms"]
