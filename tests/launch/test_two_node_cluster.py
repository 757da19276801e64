"""A tiny RL job on a simulated two-node Ray cluster: every colocated group (policy rank i with rollout engine i)
stays on one node, the ranks spread over both nodes, and the job trains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_colocated_groups_stay_within_one_node(tmp_path):
    script = Path(__file__).with_name("two_node_job.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True, timeout=ceiling(900)
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["steps"] == 2
    assert sorted(out["policy_nodes"]) == out["worker_nodes"]  # one rank per node
    assert out["rollout_nodes"] == out["policy_nodes"]  # engine i shares rank i's node (and bundle)
