"""GRPO and SFT end to end on variable-length data with packed rows and token-budget micro-batches, two data-parallel
ranks, one run on each training backend (GRPO under FSDP2, SFT under DeepSpeed): the runs finish (the ranks agree
on each step's micro-batch count), and log the padding fraction of their training forwards and the real tokens
trained per second."""

from __future__ import annotations

import json
import random

import pytest

from rlhf.launch.job import run
from rlhf.planning.plan import plan
from rlhf.spec import check
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow
FILLER = "the quick brown fox jumps over a lazy dog while "


def _varlen_rows(path, n: int, key: str, seed: int) -> str:
    """Rows whose texts spread from a few to ~60 characters (tokens, for the byte-level tokenizer)."""
    rnd = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            a, b = rnd.randint(1, 4), rnd.randint(1, 4)
            lead = FILLER[: rnd.randint(0, len(FILLER))]
            f.write(json.dumps({"input": f"{lead}{a}+{b}=", key: str(a + b)}) + "\n")
    return str(path)


def _run_and_read(spec, run_dir) -> tuple[list[float], list[float], list[dict]]:
    """The run's logged padding fractions and tokens per second, and all its metric rows."""
    check(spec)
    run(spec, plan(spec), run_dir)
    rows = read_metrics(run_dir)
    padding = [r["train/padding_fraction"] for r in rows if "train/padding_fraction" in r]
    speed = [r["train/tokens_per_s"] for r in rows if "train/tokens_per_s" in r]
    assert len(padding) == len(speed) == 2, rows
    assert all(0 <= p < 0.5 for p in padding) and all(s > 0 for s in speed), (padding, speed)
    return padding, speed, rows


def test_grpo_fsdp2_and_sft_deepspeed_on_varied_lengths_log_padding_and_tokens_per_second(
    ray_cluster, tiny_spec, tmp_path
):
    prompts = _varlen_rows(tmp_path / "prompts.jsonl", 64, "label", seed=1)
    spec = tiny_spec(
        "grpo_tiny_cpu",
        "trainer.backend=fsdp2",
        f"data.train_files=[{prompts}]",
        "data.eval_files=[]",
        "eval.steps=0",
        "trainer.max_steps=2",
        "rollout.prompts_per_step=4",
        "trainer.max_tokens_per_micro_batch=160",
        "trainer.max_tokens_per_forward=200",
    )
    rows = _run_and_read(spec, tmp_path / "grpo")[2]
    assert not any(k.startswith("train/tokens_") and k != "train/tokens_per_s" for r in rows for k in r)

    pairs = _varlen_rows(tmp_path / "sft.jsonl", 64, "output", seed=2)
    spec = tiny_spec(
        "sft_tiny_cpu",
        "trainer.backend=deepspeed",
        f"data.train_files=[{pairs}]",
        "data.eval_files=[]",
        "trainer.max_steps=2",
        "trainer.max_tokens_per_micro_batch=160",
    )
    _run_and_read(spec, tmp_path / "sft")
