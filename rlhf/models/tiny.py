"""The tiny-model factory behind ``model.make_local=true``: a small Llama/Qwen2/Qwen3 with random weights and a
byte-level tokenizer, made once per set of dimensions and cached, then loaded like any other local HF model.

The cache folder is ``cache_dir()/models/<name>-<hash of the dimensions>``. It is written to a temporary folder
and renamed into place, so two processes racing to make the same model both end up with one complete folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from rlhf.spec.names import MODEL_ARCHITECTURES
from rlhf.spec.paths import cache_dir
from rlhf.spec.schema import ModelSpec

# Part of the cache key: bump when the factory's output changes (tokenizer, init), so old caches are not reused.
FACTORY_VERSION = 1
INIT_SEED = 1234  # fixed: the model is a function of its dimensions only
TINY_MARKER = "rlhf_tiny.json"  # in every model folder made here: its dimensions, and that its tokenizer is ours


def tiny_model_dims(spec: ModelSpec) -> dict:
    """The fields that determine the made model (and hence its cache key)."""
    return {
        "architecture": spec.architecture,
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "chat_template": spec.chat_template,
        "factory_version": FACTORY_VERSION,
        "seed": INIT_SEED,
    }


def tiny_model_dir(spec: ModelSpec) -> Path:
    digest = hashlib.sha256(json.dumps(tiny_model_dims(spec), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{spec.name or 'tiny'}-{digest}"


def make_tiny_model(spec: ModelSpec) -> Path:
    """The folder of the tiny model for ``spec``'s dimensions, made (atomically) when missing."""
    final = tiny_model_dir(spec)
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        _write_tiny_model(spec, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process renamed its copy first (the target exists and is not empty): use theirs.
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _config(spec: ModelSpec, tokenizer) -> object:
    from transformers import AutoConfig

    if spec.architecture not in MODEL_ARCHITECTURES:
        raise ValueError(
            f"model.architecture={spec.architecture!r}: the tiny factory makes {', '.join(MODEL_ARCHITECTURES)}"
        )
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(f"model.vocab_size={spec.vocab_size} is smaller than the byte tokenizer ({len(tokenizer)})")
    if spec.architecture == "qwen2" and spec.hidden_size != spec.num_heads * spec.head_dim:
        # Qwen2 derives head_dim = hidden_size / num_heads.
        raise ValueError(
            f"model.head_dim={spec.head_dim}: qwen2 needs hidden_size == num_heads x head_dim "
            f"({spec.hidden_size} != {spec.num_heads} x {spec.head_dim})"
        )
    return AutoConfig.for_model(
        spec.architecture,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        attention_dropout=0.0,
        dtype="float32",
    )


def _write_tiny_model(spec: ModelSpec, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlhf.models.tokenizer import byte_level_tokenizer

    tokenizer = byte_level_tokenizer(spec.chat_template)
    config = _config(spec, tokenizer)
    # A private generator state: making the model must not disturb the caller's RNG (resume equality relies on it).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(INIT_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / TINY_MARKER).write_text(json.dumps(tiny_model_dims(spec), indent=1, sort_keys=True))
