"""A LoRA run (DPO, policy and reference in separate placement groups) saves adapters only; the merge command
turns them into a plain model that gives the same outputs as base + adapters."""

from __future__ import annotations

import pytest
import torch

from rlhf.launch.job import run
from rlhf.models.forward import causal_lm_log_probs
from rlhf.models.loading import resolve_model_path, tokenizer_for
from rlhf.planning.plan import plan

pytestmark = pytest.mark.slow


def test_lora_dpo_split_placement_then_merge(tiny_spec, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlhf.models.merge_lora import main as merge

    spec = tiny_spec(
        "dpo_tiny_cpu",
        "placement=split",
        "model.lora.rank=8",
        "model.lora.alpha=16",
        "trainer.lr=5e-3",
        "trainer.max_steps=3",
    )
    p = plan(spec)
    assert p.roles["policy"].group != p.roles["reference"].group  # two groups: the unfused path
    result = run(spec, p, tmp_path / "run")
    adapter = tmp_path / "run" / "model"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    assert result["final_metrics"]["eval/margin"] != 0  # the adapters moved the policy off its reference

    base = resolve_model_path(spec.model)
    merge(["--base", base, "--adapter", str(adapter), "--out", str(tmp_path / "merged")])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
    tok = tokenizer_for(spec.model)
    b = tok(["<|user|>\nWhat comes after 3?<|end|>\n<|assistant|>\n4<|end|>\n"], return_tensors="pt")
    expected = causal_lm_log_probs(with_adapter, b.input_ids, b.attention_mask)
    torch.testing.assert_close(
        causal_lm_log_probs(merged, b.input_ids, b.attention_mask), expected, atol=1e-5, rtol=1e-5
    )
    plain = causal_lm_log_probs(AutoModelForCausalLM.from_pretrained(base), b.input_ids, b.attention_mask)
    assert not torch.allclose(plain, expected)
