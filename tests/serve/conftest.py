"""The tiny reward model the serve tests score with."""

from __future__ import annotations

import pytest
import torch
from serve_helpers import byte_tokenizer


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory):
    """(folder, model, tokenizer) of a 2-layer sequence-classification Llama with a byte-level tokenizer."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    path = tmp_path_factory.mktemp("rm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model.eval(), tokenizer
