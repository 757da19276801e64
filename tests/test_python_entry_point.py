"""rlhf.run(...): the Python entry point trains the tiny GRPO recipe from a Python session with a lambda reward and
an in-memory dataset in either of TRL's formats, returning the run folder, the model and the last metrics; as in
TRL, the data's format decides what the function gets (a string prompt: strings, no chat template; a message list:
messages); a mistake is refused as rlhf-run refuses it, before anything starts; and ``import rlhf`` imports nothing
heavy."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN

import rlhf
from rlhf.spec import SpecInvalid


@pytest.mark.parametrize("conversational", [False, True], ids=["standard", "conversational"])
def test_a_lambda_reward_and_an_in_memory_dataset_train_the_tiny_grpo_recipe(tmp_path, conversational):
    def prompt(text):
        return [{"role": "user", "content": text}] if conversational else text

    rows = [{"prompt": prompt(f"{a}+{b}="), "answer": str(a + b)} for a in range(5) for b in range(5)]
    seen: list[tuple] = []

    # The function for TRL's standard format, as a TRL user writes it: completions are strings.
    def exact(prompts, completions, answer, **kwargs):  # TRL's contract: keyword call, dataset columns by name
        seen.extend(zip(prompts, completions, answer, strict=True))
        return [float(c.strip().startswith(a)) for c, a in zip(completions, answer, strict=True)]

    def exact_chat(prompts, completions, answer, **kwargs):  # conversational: message lists
        seen.extend(zip(prompts, completions, answer, strict=True))
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer, strict=True)]

    result = rlhf.run(
        "grpo_tiny_cpu",
        *TINY_RUN[1:],
        "trainer.max_steps=1",
        "logging.mlflow=false",  # no data.label_key: TRL's data has no label, its columns reach the function
        reward_funcs=[exact_chat if conversational else exact],
        train_dataset=rows,
        run_dir=tmp_path / "run",
    )
    assert result.run_dir == (tmp_path / "run").resolve()
    assert (result.model_dir / "config.json").is_file()
    assert "train/reward" in result.metrics and result.summary["steps"] == 1
    assert len(seen) == 8 * 8  # the step's 8 prompts x 8 samples, each scored once
    assert {a for _, _, a in seen} <= {r["answer"] for r in rows}
    for p, c, _ in seen:  # what TRL hands for each format: the prompt as the data gave it
        assert p in [r["prompt"] for r in rows]
        assert isinstance(c, str) if not conversational else c[0]["role"] == "assistant" and len(c) == 1
    # the chat template: asked for by the message lists only (the recipe's true is TRL's false for strings)
    chat = "apply_chat_template: true" if conversational else "apply_chat_template: false"
    assert chat in (tmp_path / "run" / "resolved_config.yaml").read_text()
    assert (tmp_path / "run" / "data" / "train.parquet").is_file()  # the dataset as every worker reads it


def test_a_mistake_is_refused_before_anything_starts_as_rlhf_run_refuses_it(tmp_path):
    with pytest.raises(SpecInvalid, match="trainer.zero_stage=7: must be one of 0, 1, 2, 3"):
        rlhf.run("grpo_tiny_cpu", "trainer.zero_stage=7", run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_importing_rlhf_imports_nothing_heavy():
    code = "import sys, rlhf; print(sorted(m for m in ('torch', 'ray', 'hydra', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=ceiling(60))
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
