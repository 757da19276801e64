"""``model.*``: the policy (or SFT/RM/DPO) base model with the dimensions a plan needs offline, and its LoRA."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf.spec import names
from rlhf.spec.keys import key


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters through peft."""

    rank: int = key(0, "adapter rank; 0 disables LoRA", ge=0)
    alpha: int = key(16, "LoRA alpha (scale = alpha / rank)", gt=0)
    dropout: float = key(0.0, "dropout on the adapter input", ge=0, lt=1)
    target_modules: list[str] = key(
        factory=lambda: ["all-linear"], doc="module names to adapt, or all-linear", nonempty=True
    )


@dataclass(frozen=True)
class ModelSpec:
    """conf/model/*.yaml: the policy (or SFT/RM/DPO) base model, with the dimensions a plan needs offline."""

    name: str = key("tiny", "model option name (informational)", nonempty=True)
    path: str = key("", "local HF folder or hub name org/name; when given it is the model, whatever make_local says")
    make_local: bool = key(
        False, "with model.path empty: random init from these dimensions + a byte-level tokenizer, cached (no download)"
    )
    tokenizer_path: str = key("", "tokenizer folder or hub name; empty: same as path")
    architecture: str = key("llama", "for the tiny factory and the plan", choices=names.MODEL_ARCHITECTURES)
    hidden_size: int = key(128, "hidden size", ge=1)
    num_layers: int = key(2, "transformer layers", ge=1)
    num_heads: int = key(2, "attention heads", ge=1)
    num_kv_heads: int = key(2, "key/value heads (GQA)", ge=1)
    head_dim: int = key(64, "dimension per head", ge=1)
    intermediate_size: int = key(256, "MLP inner size", ge=1)
    vocab_size: int = key(512, "vocabulary size", ge=1)
    max_position_embeddings: int = key(1024, "longest sequence the model supports", ge=1)
    tie_word_embeddings: bool = key(False, "lm_head shares the embedding matrix")
    attn_implementation: str = key(
        "sdpa", "attention kernel (flash_attention_2 needs flash-attn)", choices=names.ATTN_IMPLEMENTATIONS
    )
    chat_template: str | None = key(None, "Jinja template overriding the tokenizer's")
    trust_remote_code: bool = key(False, "allow the model folder's own code")
    lora: LoraSpec = field(default_factory=LoraSpec)
