"""Reward/critic models with a value head (AutoModelForSequenceClassification compatible), forward helpers,
LoRA adapters and their merge command."""

from __future__ import annotations

import json

import pytest
import torch

from rlhf.models.forward import causal_lm_log_probs, value_model_rewards, value_model_values
from rlhf.models.loading import load_causal_lm, resolve_model_path, tokenizer_for
from rlhf.models.value_head import load_value_model
from rlhf.spec.schema import LoraSpec, ModelSpec

SPEC = ModelSpec(make_local=True)


@pytest.fixture(scope="module")
def base() -> str:
    return resolve_model_path(SPEC)


@pytest.fixture(scope="module")
def tok():
    return tokenizer_for(SPEC)


def _batch(tok, side: str):
    tok.padding_side = side
    return tok(["hello there", "hi"], padding=True, return_tensors="pt")


def test_reward_model_saves_as_sequence_classification_with_mean_std(base, tok, tmp_path):
    from transformers import AutoModelForSequenceClassification

    model = load_value_model(base, "reward", init_value_head=True).eval()
    right, left = _batch(tok, "right"), _batch(tok, "left")
    r = value_model_rewards(model, right.input_ids, right.attention_mask)
    # The reward sits at the last real token, wherever the padding is.
    torch.testing.assert_close(r, value_model_rewards(model, left.input_ids, left.attention_mask))
    model.config.mean, model.config.std = 0.5, 2.0
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForSequenceClassification"] and cfg["value_head_prefix"] == "score"

    tok.padding_side = "right"
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(plain(**right).logits.squeeze(-1), r)

    normalized = load_value_model(str(tmp_path), "reward", normalize_reward=True).eval()
    assert normalized.mean.item() == 0.5 and normalized.std.item() == 2.0
    torch.testing.assert_close(value_model_rewards(normalized, right.input_ids, right.attention_mask), (r - 0.5) / 2)


def test_critic_values_are_action_aligned(base, tok):
    critic = load_value_model(base, "critic")
    b = _batch(tok, "right")
    assert value_model_values(critic, b.input_ids, b.attention_mask).shape == (2, b.input_ids.shape[1] - 1)


def test_lora_adapters_merge_into_a_plain_model(base, tok, tmp_path):
    from transformers import AutoModelForCausalLM

    from rlhf.models.merge_lora import main as merge_main

    model = load_causal_lm(base, lora=LoraSpec(rank=4, alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():  # make the adapters matter (lora_B starts at zero)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.05)
    b = _batch(tok, "right")
    expected = causal_lm_log_probs(model, b.input_ids, b.attention_mask)
    model.save_pretrained(tmp_path / "adapter")
    merge_main(["--base", base, "--adapter", str(tmp_path / "adapter"), "--out", str(tmp_path / "merged")])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    torch.testing.assert_close(
        causal_lm_log_probs(merged, b.input_ids, b.attention_mask), expected, atol=1e-5, rtol=1e-5
    )
    assert (tmp_path / "merged" / "tokenizer.json").is_file()
