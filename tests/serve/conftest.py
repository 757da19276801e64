"""The tiny reward model the serve tests score with."""

from __future__ import annotations

import pytest
import torch
from serve_helpers import byte_tokenizer, tiny_llama_config


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory):
    """(folder, model, tokenizer) of a 2-layer sequence-classification Llama with a byte-level tokenizer."""
    from transformers import LlamaForSequenceClassification

    tokenizer = byte_tokenizer()
    config = tiny_llama_config(tokenizer)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    path = tmp_path_factory.mktemp("rm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model.eval(), tokenizer
