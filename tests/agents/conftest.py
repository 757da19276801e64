"""Fixtures for agent tests (helpers live in agent_helpers.py)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_helpers import make_bpe_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return make_bpe_tokenizer()


@pytest.fixture
def write_agent(tmp_path: Path) -> Callable[[str], str]:
    """Write an agent file from source text; returns its path."""
    counter = iter(range(10**6))

    def write(source: str) -> str:
        path = tmp_path / f"agent_{next(counter)}.py"
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write


@pytest.fixture(scope="session")
def tiny_hf_engine(tokenizer):
    """HFEngine over a random 2-layer Llama (hidden 128, heads of dim 64) with the BPE tokenizer."""
    torch = pytest.importorskip("torch")
    hf_engine = pytest.importorskip("rlhf.backends.rollout.hf.engine")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
    return hf_engine.HFEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer)
