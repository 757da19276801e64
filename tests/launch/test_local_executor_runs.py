"""The local executor end to end, as a user starts it: ``rlhf-run`` of a one-process recipe runs in one process,
says so in its start-up line, and needs no Ray: Ray is made unimportable here, so a run that imported it would fail.
With trainer.backend=fsdp2 this is the shape scripts/gpu_check.sh runs on a GPU whose image has torch and
transformers alone (DeepSpeed stays importable here: accelerate, under transformers' save_pretrained, imports it
whenever it is installed, which it is in this venv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def _without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing any of ``modules`` fails."""
    root = tmp_path / "blocked"
    for name in modules:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text(f"raise ImportError('this run must not import {name}')\n")
    return dict(os.environ, PYTHONPATH=str(root), HYDRA_FULL_ERROR="0")


def test_a_one_process_grpo_with_fsdp2_and_an_hf_engine_runs_in_one_process_without_ray(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            str(BIN / "rlhf-run"), "+recipe=grpo_tiny_cpu", "trainer.backend=fsdp2", "trainer.max_steps=2",
            "rollout.prompts_per_step=8", "trainer.global_batch=32", "trainer.micro_batch_per_device=16",
            "eval.steps=0", "logging=console", "logging.progress=false", f"hydra.run.dir={run_dir}",
        ],
        capture_output=True, text=True, cwd=tmp_path, env=_without(tmp_path, "ray"),
        timeout=ceiling(600),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "executor: local (auto: one process on this machine" in done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("start-up "))
    assert "(executor: local)" in line and "local executor" in line, line
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/policy_loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # the engine beside the policy got each update (a weight sync between two lanes of one process)
    assert all(r["train/logprobs_diff"] < 1e-3 and r["rollout/sync_bytes"] > 0 for r in steps)
    assert (run_dir / "model" / "config.json").is_file()
