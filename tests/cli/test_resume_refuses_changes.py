"""--resume with a config that changes what the checkpoints were trained for (algorithm=, model=, or a key the
checkpoint's training backend lays its files out by: DeepSpeed's trainer.zero_stage) is refused before
torch or Ray is imported, naming each key with its old and new value, and leaves the run's command as it was: a
plain --resume afterwards continues the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ceilings import ceiling
from run_helpers import TINY_RUN, without_modules

BIN = Path(sys.executable).parent
RUN = [*TINY_RUN, "trainer.max_steps=2", "checkpoint.save_steps=1", "logging.mlflow=false"]


def _rlhf_run(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "rlhf-run"), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=ceiling(300)
    )


def test_a_resume_that_changes_algorithm_or_model_is_refused_at_once_and_a_plain_resume_still_works(tmp_path):
    run_dir = tmp_path / "run"
    first = _rlhf_run([*RUN, f"hydra.run.dir={run_dir}"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = (run_dir / "command.json").read_bytes()
    blocked = without_modules(tmp_path, "torch", "ray", "transformers")  # refused before anything a run needs
    refusals = {
        "algorithm=rloo": ["algorithm.name: 'grpo' -> 'rloo'"],
        "model=small": ["model.name: 'tiny' -> 'small'", "model.hidden_size: 128 -> 512"],
        "trainer.zero_stage=1": ["trainer.zero_stage: 2 -> 1"],  # the checkpoint's backend lays its files out by it
    }
    for override, keys in refusals.items():
        r = _rlhf_run(["--resume", str(run_dir), "trainer.max_steps=3", override], tmp_path, blocked)
        assert r.returncode == 2, r.stderr[-3000:]
        assert f"cannot resume {run_dir}" in r.stderr
        for key in keys:
            assert key in r.stderr, r.stderr[-3000:]
        assert f"checkpoint.init_from={run_dir}" in r.stderr
        assert "Traceback" not in r.stderr
    assert (run_dir / "command.json").read_bytes() == recorded

    again = _rlhf_run(["--resume", str(run_dir), "trainer.max_steps=3"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {run_dir / 'checkpoints' / 'step00000002'} at step 2" in again.stderr
    assert "changed settings" not in again.stderr  # a longer run is not a change worth a line
