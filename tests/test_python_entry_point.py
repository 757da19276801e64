"""rlhf.run(...): the Python entry point trains the tiny GRPO recipe from a Python session with a lambda reward and
an in-memory dataset, returning the run folder, the model and the last metrics; a mistake is refused as rlhf-run
refuses it, before anything starts; and ``import rlhf`` imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN

import rlhf
from rlhf.spec import SpecInvalid


def test_a_lambda_reward_and_an_in_memory_dataset_train_the_tiny_grpo_recipe(tmp_path):
    rows = [
        {"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)} for a in range(5) for b in range(5)
    ]
    seen: list[str] = []

    def exact(completions, answer, **kwargs):  # TRL's contract: keyword call, dataset columns by name
        seen.extend(answer)
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer, strict=True)]

    result = rlhf.run(
        "grpo_tiny_cpu",
        *TINY_RUN[1:],
        "trainer.max_steps=2",
        "logging.mlflow=false",
        "data.label_key=answer",
        reward_funcs=[exact],
        train_dataset=rows,
        run_dir=tmp_path / "run",
    )
    assert result.run_dir == (tmp_path / "run").resolve()
    assert (result.model_dir / "config.json").is_file()
    assert "train/reward" in result.metrics and result.summary["steps"] == 2
    assert set(seen) <= {r["answer"] for r in rows} and len(seen) >= 2 * 8  # every sample of both steps scored
    assert (tmp_path / "run" / "data" / "train.parquet").is_file()  # the dataset as every worker reads it


def test_a_mistake_is_refused_before_anything_starts_as_rlhf_run_refuses_it(tmp_path):
    with pytest.raises(SpecInvalid, match="trainer.zero_stage=7: must be one of 0, 1, 2, 3"):
        rlhf.run("grpo_tiny_cpu", "trainer.zero_stage=7", run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_importing_rlhf_imports_nothing_heavy():
    code = "import sys, rlhf; print(sorted(m for m in ('torch', 'ray', 'hydra', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=ceiling(60))
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
