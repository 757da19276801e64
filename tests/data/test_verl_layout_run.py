"""The tiny GRPO recipe trains on a parquet made as veRL's GSM8K preprocessing makes it, read as it is
(``data.input_key=prompt data.label_key=reward_model.ground_truth``): ``rlhf-run`` on the local executor, one step,
the reward function receiving veRL's ground truths as labels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN
from verl_gsm8k_layout import RAW, extract_solution, write_gsm8k_parquet

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

REWARD = """\
import json
from pathlib import Path


def reward_func(queries, prompts, labels, **kwargs):
    with open(Path(__file__).with_name("labels.jsonl"), "a") as f:
        f.write(json.dumps(labels) + "\\n")
    return [float(q.strip().endswith(label)) for q, label in zip(queries, labels)]
"""


def test_grpo_trains_on_a_verl_gsm8k_parquet_as_it_is(tmp_path):
    train = write_gsm8k_parquet(tmp_path / "train.parquet", repeat=2)  # 8 prompts: one step
    test = write_gsm8k_parquet(tmp_path / "test.parquet", split="test")
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            str(BIN / "rlhf-run"), *TINY_RUN, "trainer.max_steps=1", "logging=console", "reward.verifier=",
            f"reward.function={reward}", f"data.train_files=[{train}]", f"data.eval_files=[{test}]",
            "data.input_key=prompt", "data.label_key=reward_model.ground_truth", f"hydra.run.dir={run_dir}",
        ],
        capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, HYDRA_FULL_ERROR="0"),
        timeout=ceiling(300),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "executor: local" in done.stderr
    assert "train prompt: 8 rows read, 8 used" in done.stderr, done.stderr[-4000:]
    assert "veRL parquet layout, from the columns: data.datasource_key=data_source" in done.stderr
    assert "step 1: " in done.stderr and (run_dir / "model").is_dir()
    seen = [label for line in (tmp_path / "labels.jsonl").read_text().splitlines() for label in json.loads(line)]
    assert len(seen) == 64  # 8 prompts x 8 samples
    assert set(seen) == {extract_solution(r["answer"]) for r in RAW} == {"7", "24", "1000", "9"}
