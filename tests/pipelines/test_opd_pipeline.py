"""On-policy distillation end to end: opd_tiny_cpu through DeepSpeed and the hf engine (the local executor), with the
teacher fused into the policy's processes (colocate_all) or in its own group (split), and the load-time tokenizer check.

The teachers are tiny models saved here (the learning figure comes from the recipe run in the README): the student's
own initial weights, which must score every token exactly as the student does, and a perturbed copy, which must not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlhf.errors import UserError
from rlhf.planning.plan import plan
from rlhf.spec import check
from rlhf.spec.build import load_spec

QUIET = ["logging.mlflow=false", "logging.progress=false"]
SMALL = ["rollout.prompts_per_step=8", "trainer.global_batch=32", "trainer.micro_batch_per_device=32"]


def student_folder() -> Path:
    from rlhf.models.tiny import make_tiny_model

    return make_tiny_model(load_spec(["+recipe=opd_tiny_cpu", "teacher.model_path="]).model)


def perturbed_teacher(out: Path) -> Path:
    """The student's initial model with every weight moved by noise: a different, random teacher."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = student_folder()
    model = AutoModelForCausalLM.from_pretrained(src)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


def distil(run_dir: Path, teacher: Path, *overrides: str) -> tuple[dict, list[dict], list[dict]]:
    from rlhf.launch.job import run

    spec = load_spec(["+recipe=opd_tiny_cpu", f"teacher.model_path={teacher}", *QUIET, *SMALL, *overrides])
    check(spec)
    result = run(spec, plan(spec), run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, [r for r in rows if "train/reverse_kl" in r], [r for r in rows if "eval/eval_copy_pass1" in r]


@pytest.mark.slow
def test_a_student_equal_to_its_teacher_stays_there(tmp_path):
    # colocate_all: the teacher is fused into the policy's process; eval pass@1 at step 0 (untrained) and step 2.
    # The same weights score every sampled token alike: zero reward, zero advantage, no update, at every step.
    result, steps, evals = distil(tmp_path, student_folder(), "trainer.max_steps=2", "eval.steps=2")
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert abs(s["train/reverse_kl"]) < 1e-5 and s["train/advantages_abs_mean"] < 1e-5, s
    assert [e["step"] for e in evals] == [0, 2]
    assert 0.0 <= evals[-1]["eval/eval_copy_pass1"] <= 1.0
    assert (Path(result["model_dir"]) / "config.json").is_file()


@pytest.mark.slow
def test_a_teacher_in_its_own_group_scores_the_students_samples(tmp_path):
    teacher = perturbed_teacher(tmp_path / "teacher")
    overrides = ["placement=split", "hardware.devices_per_node=3", "hardware.cpus_per_node=3", "eval.steps=0"]
    spec = load_spec(["+recipe=opd_tiny_cpu", f"teacher.model_path={teacher}", *SMALL, *overrides])
    assert [g.roles for g in plan(spec).groups] == [("policy",), ("teacher",), ("rollout",)]
    result, steps, _ = distil(tmp_path / "run", teacher, "trainer.max_steps=2", *overrides)
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert s["train/reverse_kl"] > 0.1 and math.isfinite(s["train/policy_loss"]), s
        assert s["train/advantages_abs_mean"] > 0
        assert s["train/score"] >= 0  # the exact verifier still scores the samples


def test_a_made_student_and_a_teacher_with_another_tokenizer_fail_at_load(tmp_path):
    from rlhf.models.tokenizer import byte_level_tokenizer
    from rlhf.pipelines.rl_roles import check_teacher_tokenizer

    other = byte_level_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["<|tool|>"]})
    other.save_pretrained(tmp_path / "teacher")
    spec = load_spec(["+recipe=opd_tiny_cpu", f"teacher.model_path={tmp_path / 'teacher'}"])
    check(spec)  # validation cannot see a model that is made only when the run starts
    with pytest.raises(UserError, match=r"teacher.model_path=.*share the student's tokenizer.*262 vs 263 tokens"):
        check_teacher_tokenizer(spec, str(student_folder()))
    byte_level_tokenizer().save_pretrained(tmp_path / "same")
    same = load_spec(["+recipe=opd_tiny_cpu", f"teacher.model_path={tmp_path / 'same'}"])
    assert check_teacher_tokenizer(same, str(student_folder())) == str(tmp_path / "same")
