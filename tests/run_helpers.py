"""Helpers of the tests that run rlhf-run in processes of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ceilings import ceiling

# The tiny GRPO recipe in small steps, quiet: the runs the lifecycle tests start and stop.
TINY_RUN = [
    "+recipe=grpo_tiny_cpu",
    "rollout.prompts_per_step=8",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=16",
    "eval.steps=0",
    "logging.progress=false",
]


def without_modules(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing any of ``modules`` fails: a command that runs there provably imported none
    of them."""
    root = tmp_path / "blocked"
    for name in modules:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text(f"raise ImportError('this command must not import {name}')\n")
    return dict(os.environ, PYTHONPATH=str(root), HYDRA_FULL_ERROR="0")


def userns_tmpfs(tmp_path: Path) -> bool:
    """Whether this machine lets an unprivileged user + mount namespace mount a tmpfs (a real small disk to fill)."""
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = ["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"]
    return subprocess.run(cmd, capture_output=True, timeout=ceiling(30)).returncode == 0
