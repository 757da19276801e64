"""A reward function that raises in a real run, as a user meets it: ``rlhf-run`` (the local executor, one step of the
tiny recipe) stops with one line naming the file, the line and the sample that broke it, and the run folder keeps the
full traceback, the user's frames in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN

from rlhf.rewards.failure import TRACEBACK_FILE

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

# One label is not a number: int() raises on line 4 for that sample alone.
REWARD = """\
def reward_func(queries, prompts, labels, **kwargs):
    rewards = []
    for query, label in zip(queries, labels):
        rewards.append(float(query.strip().endswith(str(int(label)))))
    return rewards
"""


def test_a_raising_reward_function_names_its_line_and_sample_and_the_run_folder_keeps_the_traceback(tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text(REWARD)
    rows = [{"input": f"Repeat the digit: {d}", "label": str(d)} for d in range(7)]
    rows.append({"input": "Spell the number 7", "label": "seven"})
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # 8 prompts: one step
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            str(BIN / "rlhf-run"), *TINY_RUN, "trainer.max_steps=1", "logging=console", "reward.verifier=",
            f"reward.function={reward}", f"data.train_files=[{tmp_path / 'prompts.jsonl'}]", f"hydra.run.dir={run_dir}",
        ],
        capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, HYDRA_FULL_ERROR="0"),
        timeout=ceiling(300),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-4000:]
    assert "executor: local" in done.stderr and "Traceback" not in done.stderr, done.stderr[-4000:]
    line = done.stderr.strip().splitlines()[-1]
    kept = run_dir / TRACEBACK_FILE
    assert line.startswith(f"error: reward function {reward}, line 4 (in reward_func: `rewards.append("), line
    assert "raised ValueError: invalid literal for int() with base 10: 'seven' on sample " in line, line
    assert "Spell the number 7" in line and ", label 'seven'; " in line, line
    assert line.endswith(f"the full traceback is in {kept}"), line  # no checkpoint yet: nothing to resume
    text = kept.read_text()
    assert f'File "{reward}", line 4, in reward_func' in text and "ValueError: invalid literal" in text, text
