"""A TRL-style reward file and TRL's own ``trl.rewards.think_format_reward``, as a weighted list, train the tiny GRPO
recipe as a user runs it (``rlhf-run``, the local executor, one step): the file, written as TRL's documentation
writes one (``reward_func(prompts, completions, answer, **kwargs)``), is called with TRL's keyword arguments and the
dataset's ``answer`` column, and each function's reward is logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

# TRL's documented form: the completion is a message list when the prompt is one (conversational data, which
# think_format_reward needs); extra columns by name.
REWARD = """\
import json, os

def reward_func(prompts, completions, answer, **kwargs):
    with open(os.environ["TRL_CALLS"], "a") as f:
        f.write(json.dumps({"keys": sorted(kwargs), "completion": completions[0], "answer": answer[0],
                            "n": len(completions), "ids": len(kwargs["completion_ids"])}) + "\\n")
    texts = [c[0]["content"] for c in completions]
    return [1.0 if t.strip().startswith(a) else 0.0 for t, a in zip(texts, answer)]
"""


def test_a_trl_reward_file_and_trls_think_format_reward_train_the_tiny_recipe(tmp_path):
    pytest.importorskip("trl")
    reward = tmp_path / "my_reward.py"
    reward.write_text(REWARD)
    rows = [  # TRL's conversational prompt-only format, 8 prompts: one step
        {"prompt": [{"role": "user", "content": f"Repeat the digit: {d}"}], "answer": str(d)} for d in range(8)
    ]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    calls, run_dir = tmp_path / "calls.jsonl", tmp_path / "run"
    done = subprocess.run(
        [
            str(BIN / "rlhf-run"), *TINY_RUN, "trainer.max_steps=1", "logging=console", "reward.verifier=",
            f"reward.function=[{reward},trl.rewards.think_format_reward]", "reward.weights=[1.0,0.5]",
            f"data.train_files=[{tmp_path / 'prompts.jsonl'}]", "data.eval_files=[]", "data.label_key=answer",
            f"hydra.run.dir={run_dir}",
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=ceiling(300),
        env=dict(os.environ, HYDRA_FULL_ERROR="0", TRL_CALLS=str(calls)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "executor: local" in done.stderr, done.stderr[-4000:]
    (call,) = [json.loads(line) for line in calls.read_text().splitlines()]  # one batch, one call
    assert call["keys"] == ["completion_ids", "log_extra", "log_metric", "trainer_state"], call
    assert call["n"] == call["ids"] == 8 * 8  # prompts x samples per prompt (TINY_RUN's recipe: 8)
    assert call["completion"][0]["role"] == "assistant" and call["answer"] in "01234567", call
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "train/reward" in m)
    assert "train/reward/reward_func" in step and "train/reward/think_format_reward" in step, sorted(step)
    assert step["train/reward/unscored"] == 0.0
