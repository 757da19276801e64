"""The tiny-model factory: dimensions honoured, byte-level tokenizer with chat template, cached atomically,
round-trips through save_pretrained / from_pretrained."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from rlhf.models.loading import resolve_model_path, tokenizer_for
from rlhf.models.tiny import make_tiny_model, tiny_model_dir
from rlhf.models.tokenizer import SPECIAL_TOKENS, byte_level_tokenizer
from rlhf.spec.schema import ModelSpec


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RLHF_CACHE", str(tmp_path))
    return tmp_path


def test_byte_tokenizer_round_trips_any_text_and_has_chat_template():
    tok = byte_level_tokenizer()
    assert len(tok) == 256 + len(SPECIAL_TOKENS)
    text = "héllo wörld\n\t 7+5=12 ✓"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text.encode())  # one token per byte
    assert tok.decode(ids) == text
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], tokenize=False
    )
    assert chat == "<|user|>\nhi<|end|>\n<|assistant|>\nyo<|end|>\n"
    assert tok.eos_token == "<|end|>" and tok.pad_token_id != tok.eos_token_id


def test_tiny_model_is_made_once_and_loads_with_plain_transformers(cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = ModelSpec(make_local=True, architecture="qwen2", hidden_size=128, num_heads=2, num_kv_heads=1)
    path = Path(resolve_model_path(spec))
    assert path == tiny_model_dir(spec) and path.parent == cache / "models"
    mtime = (path / "config.json").stat().st_mtime
    assert make_tiny_model(spec) == path and (path / "config.json").stat().st_mtime == mtime  # cached

    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    cfg = model.config
    assert (
        cfg.model_type == "qwen2" and cfg.num_key_value_heads == 1 and cfg.hidden_size // cfg.num_attention_heads == 64
    )
    assert cfg.vocab_size == spec.vocab_size >= len(tok)
    assert tok.chat_template and tok.eos_token_id == cfg.eos_token_id

    # Same dimensions -> same weights (fixed init seed), and the round trip keeps them exactly.
    tmp = cache / "copy"
    model.save_pretrained(tmp)
    again = AutoModelForCausalLM.from_pretrained(tmp)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_racing_processes_end_with_one_complete_folder(cache):
    spec = ModelSpec(make_local=True, name="race")
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(make_tiny_model(spec))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    assert (results[0] / "model.safetensors").is_file()
    assert not [p for p in (cache / "models").iterdir() if ".tmp-" in p.name]  # no leftovers


def test_vocab_smaller_than_tokenizer_is_refused(cache):
    with pytest.raises(ValueError, match="vocab_size"):
        make_tiny_model(ModelSpec(make_local=True, vocab_size=100))


def test_tokenizer_for_spec_uses_chat_template_override(cache):
    spec = ModelSpec(make_local=True, chat_template="{{ messages[0]['content'] }}")
    tok = tokenizer_for(spec)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "x"


def test_a_tiny_models_tokenizer_loads_as_autotokenizer_loads_it():
    """load_tokenizer takes the package's own tokenizer class directly (no model config, no modeling imports):
    what it returns must equal AutoTokenizer's in every way the pipelines use."""
    from transformers import AutoTokenizer

    from rlhf.models.loading import load_tokenizer

    path = resolve_model_path(ModelSpec(make_local=True))
    ours, auto = load_tokenizer(path, padding_side="left"), AutoTokenizer.from_pretrained(path)
    auto.padding_side = "left"
    assert type(ours) is type(auto) and ours.get_vocab() == auto.get_vocab()
    for attr in ("eos_token_id", "pad_token_id", "bos_token_id", "all_special_ids", "chat_template", "padding_side"):
        assert getattr(ours, attr) == getattr(auto, attr), attr
    chat = [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    assert ours.apply_chat_template(chat, tokenize=True) == auto.apply_chat_template(chat, tokenize=True)
    assert ours(["a", "abc"], padding=True)["input_ids"] == auto(["a", "abc"], padding=True)["input_ids"]
